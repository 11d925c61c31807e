"""Suite-wide settings."""

import pytest
import torch


@pytest.fixture(autouse=True)
def _one_torch_thread():
    # CI has 2 cores shared with other jobs; idle intra-op threads spin and slow tiny ops down 10-20x.
    prev = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(prev)
