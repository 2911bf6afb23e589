"""The batches a step is traced or measured with: make_batch(batch_size, fake) for each accepted input form
(a shape, a sample batch, a function batch_size -> batch), or the shape the model's first layer says.
torch is imported inside functions only."""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Tuple

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


def _forward_takes(model: Any, name: str) -> bool:
    """Whether the model's forward takes the keyword `name` (by name, or through **kwargs)."""
    import inspect

    try:
        parameters = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return False
    return name in parameters or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())


def padded(batch: Dict[str, Any]) -> Dict[str, Any]:
    """A token batch {input_ids[, labels]} padded as a fine-tuning loop pads it: each batch padded to its longest
    sample (a collator's dynamic padding), so the first row is whole and every other row ends in padding, here its
    last quarter (a batch of one sample is padded the same way, as padding to a fixed length does); the added
    attention_mask is 0 there, and labels of the ids' shape are -100 there (the loss skips them).

    The memory does not depend on where the zeros are, nor how many: every tensor keeps the (batch, longest) shape,
    and what changes memory is only whether there is padding at all. transformers reads the mask to decide whether it
    can leave causality to SDPA's is_causal (no mask, K/V of a grouped-query model kept unexpanded) or must build a
    4-D mask (batch x 1 x seq x seq) and expand K/V to every query head (analysis.fake.attention_path). The mask is
    made by fills, so a fake trace keeps its values and decides as the real run does."""
    import torch

    ids = batch["input_ids"]
    rows, seq = ids.shape[0], ids.shape[1]
    start = 1 if rows > 1 else 0
    cut = seq - max(1, seq // 4)
    mask = torch.ones((rows, seq), dtype=torch.long, device=ids.device)
    mask[start:, cut:] = 0
    labels = batch.get("labels")
    if isinstance(labels, torch.Tensor) and labels.shape == ids.shape:
        labels[start:, cut:] = -100
    return {**batch, "attention_mask": mask}


def _padded_tokens(ids: Any, labels: bool) -> Dict[str, Any]:
    return padded({"input_ids": ids, "labels": ids.clone()} if labels else {"input_ids": ids})


def _token_batches(input: Any) -> bool:
    """A model by name's token batches (analysis.request.sequence.TokenBatches, which imports this module): a
    callable that also has its sequence length and a maker at another."""
    return callable(input) and isinstance(getattr(input, "seq", None), int) and callable(getattr(input, "at", None))


def _check_padded(model: Any, shape: Tuple[int, ...], vocab_size: Optional[int]) -> bool:
    """Whether the padded batch can carry labels; ValueError (one line) for a model or input it does not fit."""
    if vocab_size is None or len(shape) != 1:
        raise ValueError(
            "padded: a padded batch is a token batch; pass input=N tokens for a model starting with an Embedding "
            "(or vocab_size=)"
        )
    if shape[0] < 2:
        raise ValueError(f"padded: a sequence of {shape[0]} token has no room for padding; pass input=2 or more")
    name = type(model).__name__
    if not (_forward_takes(model, "input_ids") and _forward_takes(model, "attention_mask")):
        raise ValueError(
            f"padded: {name}.forward takes no input_ids and attention_mask; pass a sample batch or a function "
            "batch_size -> batch with your own mask"
        )
    return _forward_takes(model, "labels")


def _kept_real(t: Any, b: int, fake: bool) -> Any:
    """A sample's attention mask at batch b, its rows cycled, as a real tensor also in a fake trace (the same ops
    as the real run): transformers reads its values to choose the attention path (analysis.fake.attention_path). A
    fake trace runs on the CPU: a mask on a GPU is read to the host first, untracked, and nothing runs on the GPU."""
    import torch
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    from torch.utils._python_dispatch import _disable_current_modes

    if fake and t.device.type != "cpu":
        with _disable_current_modes():
            t = t.detach().cpu()
    with unset_fake_temporarily():
        rows = torch.arange(b, device=t.device) % t.shape[0]
        return t[rows].detach()


def batch_maker(
    model: Any, input: Any, vocab_size: Optional[int] = None, pad: bool = False
) -> Tuple[Callable[[int, bool], Any], str]:
    """(make_batch(batch_size, fake), description) for the accepted input forms. `pad`: the token batch (or a model
    by name's) carries an attention mask with padding and labels -100 there (padded); a sample batch or a function
    of the user's carries its own mask, as given."""
    import torch
    from torch.utils._pytree import tree_leaves, tree_map

    if input is None:
        input = infer_input(model)
    if pad and _token_batches(input):  # a model by name's batch, built here too
        return (lambda b, fake: padded(input(b))), f"{input.__name__}(batch_size), padded"
    if pad and (callable(input) or isinstance(input, (torch.Tensor, dict))):
        raise ValueError(
            "padded: applies to the built-in token batch (input=N tokens); a sample batch or a batch function "
            "carries its own attention_mask"
        )
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

        def resize(t: Any, b: int, fake: bool, values: bool = False) -> Any:
            if not isinstance(t, torch.Tensor):
                return t
            if values:
                return _kept_real(t, b, fake).requires_grad_(t.requires_grad)
            if fake:
                batch = torch.empty((b,) + tuple(t.shape[1:]), dtype=t.dtype, device="cpu")
            else:
                rows = torch.arange(b, device=t.device) % t.shape[0]  # real rows, cycled: valid token ids
                # rows taken from the sample, not from a view of it: a view would count the user's sample in the step
                batch = t[rows].detach()
            # a sample that requires grad (adversarial training, input saliency) keeps it: backward then
            # computes, and keeps until the step ends, a gradient of the input too
            return batch.requires_grad_(t.requires_grad)

        described = ", ".join(f"{tuple(t.shape[1:])} {str(t.dtype).replace('torch.', '')}" for t in samples)

        def from_sample(b: int, fake: bool) -> Any:
            if isinstance(input, dict) and isinstance(input.get("attention_mask"), torch.Tensor):
                masked = {k: v for k, v in input.items() if k != "attention_mask"}
                batch = tree_map(lambda t: resize(t, b, fake), masked)
                return {k: batch[k] if k in batch else resize(v, b, fake, values=True) for k, v in input.items()}
            return tree_map(lambda t: resize(t, b, fake), input)

        return from_sample, f"sample: {described}"
    shape = parse_shape(input)
    leaf = first_leaf(model)
    if vocab_size is None and len(shape) == 1 and isinstance(leaf, torch.nn.Embedding):
        vocab_size = leaf.num_embeddings
    if pad:
        labels = _check_padded(model, shape, vocab_size)
    if vocab_size is not None:
        vocab = positive_int(vocab_size, "vocab_size")
        if pad:
            return (
                (lambda b, fake: _padded_tokens(torch.randint(0, vocab, (b,) + shape, device="cpu"), labels)),
                f"tokens {shape} (vocab {vocab}), padded: attention_mask{' + labels' if labels else ''}",
            )
        return (
            (lambda b, fake: torch.randint(0, vocab, (b,) + shape, device="cpu")),
            f"tokens {shape} (vocab {vocab})",
        )
    dtype = _float_dtype(model)
    return (
        (lambda b, fake: torch.randn((b,) + shape, dtype=dtype, device="cpu")),
        f"{shape} {str(dtype).replace('torch.', '')}",
    )
