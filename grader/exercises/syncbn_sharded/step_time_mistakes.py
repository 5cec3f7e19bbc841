"""The usual mistakes of plan_layout's α-β model, by name, and what a check tells a student whose number matches
one (the numbers of each are in step_time_expected.py; the model that gives them is hidden)."""

MISTAKES = {
    "elements_not_bytes": "you seem to count elements, not bytes, in the communication: an fp32 value is 4 bytes",
    "all_reduce_as_gather": "a ring all-reduce moves 2(k−1)/k·B bytes per rank (a reduce-scatter, then an "
    "all-gather), not (k−1)/k·B",
    "all_reduce_no_factor": "a ring all-reduce moves 2(k−1)/k·B bytes per rank, not B: the 2(k−1)/k factor is missing",
    "no_latency": "the α terms are left out: each of a ring's 2(k−1) steps (k−1 for a gather or scatter) and each "
    "send pays the link's latency α",
    "tp_link_swapped": "tensor parallelism is charged on the wrong link: a TP group within one node uses the "
    "intra-node α and β, one that spans nodes the inter-node ones",
    "no_bubble": "the pipeline bubble is forgotten: with pp stages and m micro-batches the compute takes "
    "(m + pp − 1)/m times the ideal",
    "bubble_not_scaled": "the bubble is (pp − 1)/(m + pp − 1) of the pipelined time: the compute is the ideal "
    "times (m + pp − 1)/m",
    "fsdp_as_all_reduce": "a sharded layout gathers the parameters for forward and again for backward, and "
    "reduce-scatters the gradients: 3 collectives of (k−1)/k·B, not one all-reduce",
    "tp_once_per_step": "tensor parallelism all-reduces activations in every micro-batch: 4 per layer "
    "(2 in forward, 2 in backward) for each of the m micro-batches",
    "activations_all_micro_batches": "a rank keeps the activations of min(pp, m) micro-batches (1F1B), not of all m",
    "activations_not_split_by_tp": "tensor parallelism splits the activations too: divide them by tp",
    "state_not_split": "the model state is split over tp · pp (and over dp when sharded): 16 bytes per parameter "
    "this rank holds",
}
