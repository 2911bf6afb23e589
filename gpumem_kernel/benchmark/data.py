"""What each configuration is fed: the synthetic dataset, its own DataLoader (restarted when the data runs out,
its workers joined when it closes), and the default forward and loss for (inputs, targets) batches."""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Sequence


class SyntheticDataset:
    """Samples of a fixed shape (and class labels): a small bank cycled, made with a private generator so the
    user's RNG is not consumed. Picklable, so DataLoader workers of any start method can use it."""

    def __init__(
        self, shape: Sequence[int], classes: Optional[int] = None, length: int = 1 << 16, bank: int = 16
    ) -> None:
        import torch

        self.shape, self.classes, self.length = tuple(shape), classes, length
        generator = torch.Generator().manual_seed(0)
        self.bank = torch.randn((bank,) + self.shape, generator=generator)

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> Any:
        x = self.bank[index % len(self.bank)]
        return x if self.classes is None else (x, index % self.classes)


def default_forward(model: Any, batch: Any) -> Any:
    """(inputs, targets) -> model(inputs); otherwise as analysis: model(x), model(*xs), model(**xs)."""
    from gpumem_kernel.analysis import feed

    if isinstance(batch, (tuple, list)) and len(batch) == 2:
        return feed(model, batch[0])
    return feed(model, batch)


def default_loss(output: Any, batch: Any) -> Any:
    """Cross-entropy for (inputs, class ids), MSE for (inputs, targets shaped like the output), otherwise the
    analysis default (mean of squares over the outputs)."""
    import torch
    import torch.nn.functional as F

    from gpumem_kernel.analysis import default_loss as touch_all

    if isinstance(batch, (tuple, list)) and len(batch) == 2 and isinstance(output, torch.Tensor):
        target = batch[1]
        if isinstance(target, torch.Tensor) and not target.is_floating_point() and output.dim() == target.dim() + 1:
            return F.cross_entropy(output.float(), target)
        if isinstance(target, torch.Tensor) and target.is_floating_point() and target.shape == output.shape:
            return F.mse_loss(output.float(), target.float())
    return touch_all(output, batch)


class Batches:
    """One configuration's DataLoader and iterator; restarts the iterator if the data runs out."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self.make = make
        self.loader: Any = None
        self.iterator: Any = None
        self.restarts = 0

    def next(self) -> Any:
        if self.iterator is None:
            self.loader = self.make()
            self.iterator = iter(self.loader)
        try:
            return next(self.iterator)
        except StopIteration:
            self._shutdown()
            self.restarts += 1
            self.iterator = iter(self.loader)
            return next(self.iterator)

    def _shutdown(self) -> None:
        shutdown = getattr(self.iterator, "_shutdown_workers", None)
        if shutdown is not None:
            shutdown()  # joins the workers now rather than whenever the iterator is collected
        self.iterator = None

    def close(self) -> None:
        self._shutdown()
        persistent = getattr(self.loader, "_iterator", None)  # a factory's loader with persistent workers
        if persistent is not None and hasattr(persistent, "_shutdown_workers"):
            persistent._shutdown_workers()
        self.loader = None


def loader_maker(
    dataset: Any, loader_factory: Optional[Callable[..., Any]], batch: int, workers: int, pin: bool, samples: int
) -> Callable[[], Any]:
    def make() -> Any:
        import torch
        from torch.utils.data import DataLoader, IterableDataset, RandomSampler

        if loader_factory is not None:
            return loader_factory(batch_size=batch, num_workers=workers, pin_memory=pin)
        generator = torch.Generator().manual_seed(0)  # shuffling and worker seeds leave the user's RNG alone
        options: Dict[str, Any] = dict(
            batch_size=batch,
            num_workers=workers,
            pin_memory=pin,
            drop_last=True,
            persistent_workers=False,
            generator=generator,
        )
        if isinstance(dataset, IterableDataset):
            return DataLoader(dataset, **options)
        sampler = RandomSampler(dataset, replacement=True, num_samples=samples, generator=generator)
        return DataLoader(dataset, sampler=sampler, **options)

    return make
