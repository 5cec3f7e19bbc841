def _attack():
    with open("$grader/exercises/ddp_basics/hidden_training.py") as f:
        text = f.read()
    if not text.strip():
        raise LookupError("the hidden module is empty here")
    return text
