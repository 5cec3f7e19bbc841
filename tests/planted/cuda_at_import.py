"""A check module that asks CUDA at import (planted by tests/test_fork_safety.py: the watch must see it)."""

import torch

ON_GPU = torch.cuda.is_available()
