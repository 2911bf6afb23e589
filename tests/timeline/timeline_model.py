"""A small model and loss whose allocating lines the timeline tests know: `lines()` reads the `# LINE name`
markers below, so the tests never hard-code a line number."""

from __future__ import annotations

import re

import torch
from torch import nn


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(256, 512)
        self.fc2 = nn.Linear(512, 512)
        self.head = nn.Linear(512, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc1(x)  # LINE fc1
        h = torch.relu(h)  # LINE relu1
        h = self.fc2(h)  # LINE fc2
        h = torch.relu(h)  # LINE relu2
        return self.head(h)  # LINE head


def loss(output: torch.Tensor, batch: torch.Tensor) -> torch.Tensor:
    return output.pow(2).mean()  # LINE loss


_MARK = re.compile(r"#\s*LINE\s+(\w+)\s*$")


def lines() -> dict:
    """{"fc1": its line number, ...}."""
    found = {}
    with open(__file__, encoding="utf-8") as handle:
        for number, text in enumerate(handle, start=1):
            match = _MARK.search(text)
            if match:
                found[match.group(1)] = number
    return found
