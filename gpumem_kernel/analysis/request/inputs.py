"""The batches a step is traced or measured with: make_batch(batch_size, fake) for each accepted input form
(a shape, a sample batch, a function batch_size -> batch), or the shape the model's first layer says.
torch is imported inside functions only."""

from __future__ import annotations

from typing import Any, Callable, Optional, Tuple

from gpumem_kernel.analysis.request.arguments import positive_int, parse_shape


def first_leaf(model: Any) -> Any:
    for module in model.modules():
        if not list(module.children()) and any(True for _ in module.parameters(recurse=False)):
            return module
    return None


def _float_dtype(model: Any) -> Any:
    import torch

    for p in model.parameters():
        if p.is_floating_point():
            return p.dtype
    return torch.float32


def infer_input(model: Any) -> Tuple[int, ...]:
    """A shape for models whose first layer says it (Linear); others must pass input=."""
    import torch

    leaf = first_leaf(model)
    if isinstance(leaf, torch.nn.Linear):
        return (leaf.in_features,)
    what, example = _input_hint(leaf)
    message = f"cannot tell {type(model).__name__}'s input shape: pass input= with {what}"
    raise ValueError(message + (f", e.g. input={example}" if example else ""))


def _input_hint(leaf: Any) -> Tuple[str, Optional[str]]:
    """(what input= needs, an example accepted as written), from the model's first layer. The example has no
    spaces, so the magic's `--input (3,224,224)` reads it as one word too."""
    import torch

    if isinstance(leaf, torch.nn.Embedding):
        return "the token sequence's length", "(512,)"
    if isinstance(leaf, (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d)):
        sizes = {1: ("length", "1024"), 2: ("height, width", "224,224"), 3: ("depth, height, width", "16,112,112")}
        names, example = sizes[len(leaf.kernel_size)]
        return f"one sample's shape (channels, {names})", f"({leaf.in_channels},{example})"
    return "one sample's shape without the batch, a sample batch, or a function batch_size -> batch", None


def _fake_cpu_leaves(batch: Any) -> Any:
    """In a fake trace everything must be a fake CPU tensor; values do not matter."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensor
    from torch.utils._pytree import tree_map

    def convert(t: Any) -> Any:
        if isinstance(t, torch.Tensor) and not (isinstance(t, FakeTensor) and t.device.type == "cpu"):
            fake = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="cpu")
            return fake.requires_grad_(t.requires_grad)  # an input that requires grad gets one in backward
        return t

    return tree_map(convert, batch)


def batch_maker(model: Any, input: Any, vocab_size: Optional[int] = None) -> Tuple[Callable[[int, bool], Any], str]:
    """(make_batch(batch_size, fake), description) for the accepted input forms."""
    import torch
    from torch.utils._pytree import tree_leaves, tree_map

    if input is None:
        input = infer_input(model)
    if callable(input) and not isinstance(input, torch.Tensor):

        def from_callable(b: int, fake: bool) -> Any:
            batch = input(b)
            return _fake_cpu_leaves(batch) if fake else batch

        return from_callable, f"{getattr(input, '__name__', 'callable')}(batch_size)"
    if isinstance(input, (torch.Tensor, dict)) or (
        isinstance(input, (tuple, list)) and input and all(isinstance(t, torch.Tensor) for t in input)
    ):
        samples = [t for t in tree_leaves(input) if isinstance(t, torch.Tensor)]
        if not samples or any(t.dim() == 0 for t in samples):
            raise ValueError("input tensors must have a batch dimension first")

        def resize(t: Any, b: int, fake: bool) -> Any:
            if not isinstance(t, torch.Tensor):
                return t
            if fake:
                batch = torch.empty((b,) + tuple(t.shape[1:]), dtype=t.dtype, device="cpu")
            else:
                rows = torch.arange(b, device=t.device) % t.shape[0]  # real rows, cycled: valid token ids
                batch = t.detach()[rows]
            # a sample that requires grad (adversarial training, input saliency) keeps it: backward then
            # computes, and keeps until the step ends, a gradient of the input too
            return batch.requires_grad_(t.requires_grad)

        described = ", ".join(f"{tuple(t.shape[1:])} {str(t.dtype).replace('torch.', '')}" for t in samples)
        return (lambda b, fake: tree_map(lambda t: resize(t, b, fake), input)), f"sample: {described}"
    shape = parse_shape(input)
    leaf = first_leaf(model)
    if vocab_size is None and len(shape) == 1 and isinstance(leaf, torch.nn.Embedding):
        vocab_size = leaf.num_embeddings
    if vocab_size is not None:
        vocab = positive_int(vocab_size, "vocab_size")
        return (
            (lambda b, fake: torch.randint(0, vocab, (b,) + shape, device="cpu")),
            f"tokens {shape} (vocab {vocab})",
        )
    dtype = _float_dtype(model)
    return (
        (lambda b, fake: torch.randn((b,) + shape, dtype=dtype, device="cpu")),
        f"{shape} {str(dtype).replace('torch.', '')}",
    )
