"""A model of PyTorch's CUDA caching allocator, replayed over a traced stream of storage allocations and frees.

It follows c10/cuda/CUDACachingAllocator.cpp with its default settings (no `PYTORCH_CUDA_ALLOC_CONF`), one
stream, no expandable segments:
- every request is rounded up to a multiple of 512 B (`kMinBlockSize`);
- requests of at most 1 MiB (`kSmallSize`) use the small pool, whose segments are 2 MiB (`kSmallBuffer`);
  larger ones use the large pool: 1–10 MiB requests get a 20 MiB segment (`kLargeBuffer`), requests of 10 MiB
  and more a segment rounded up to 2 MiB (`kRoundLarge`);
- a request takes the best-fitting free block of its own pool (smallest size, then lowest address);
- a block is split when the rest is at least 512 B (small pool) or more than 1 MiB (large pool); an unsplit
  block is handed out whole, so `memory_allocated` counts its full size;
- freed blocks merge with free neighbours of the same segment, and segments stay reserved (cached).

With `expandable_segments:True` (PYTORCH_CUDA_ALLOC_CONF, the setting our OOM advice names) each pool is instead
one segment of reserved address space, mapped at its end in pages of 2 MiB (small pool) or 20 MiB (large pool)
as no free block fits: a request takes the best-fitting free block, else the free block at the mapped end
grown by as many pages as it lacks; a block is split when the rest is at least 512 B, in either pool.

With a device `limit` (the bytes the allocator may reserve) it also follows the allocator's last resort
(DeviceCachingAllocator::malloc): when a new segment would not fit (alloc_block fails), it frees every cached
segment that is wholly free (release_cached_blocks -> release_blocks; split segments stay), counts a retry
(`num_alloc_retries`) and tries again; if that fails too it records an out-of-memory (`num_ooms`). The step
between (release_available_cached_blocks) returns at once unless max_split_size_mb is set, which the model
does not follow. Without a limit nothing changes.

No torch import: this is plain arithmetic, usable (and tested) without torch.
"""

from __future__ import annotations

import os
from bisect import bisect_left, insort
from dataclasses import dataclass, field
from typing import Callable, Dict, Hashable, Iterable, List, Mapping, Optional, Tuple

MIN_BLOCK = 512  # kMinBlockSize
SMALL_SIZE = 1 << 20  # kSmallSize
SMALL_BUFFER = 2 << 20  # kSmallBuffer
LARGE_BUFFER = 20 << 20  # kLargeBuffer
MIN_LARGE_ALLOC = 10 << 20  # kMinLargeAlloc
ROUND_LARGE = 2 << 20  # kRoundLarge


def round_size(nbytes: int) -> int:
    """The size the allocator really hands out for a request of `nbytes` (before any oversize block)."""
    if nbytes < MIN_BLOCK:
        return MIN_BLOCK
    return MIN_BLOCK * ((nbytes + MIN_BLOCK - 1) // MIN_BLOCK)


def is_small(rounded: int) -> bool:
    return rounded <= SMALL_SIZE


def segment_size(rounded: int) -> int:
    """The cudaMalloc size of a new segment opened for a (rounded) request."""
    if rounded <= SMALL_SIZE:
        return SMALL_BUFFER
    if rounded < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return ROUND_LARGE * ((rounded + ROUND_LARGE - 1) // ROUND_LARGE)


def should_split(block_size: int, rounded: int, small: bool, expandable: bool = False) -> bool:
    remaining = block_size - rounded
    return remaining >= MIN_BLOCK if small or expandable else remaining > SMALL_SIZE


# options that change where blocks go or how much is reserved, which the model does not follow
_UNMODELLED = ("max_split_size_mb", "roundup_power2_divisions", "garbage_collection_threshold")


@dataclass(frozen=True)
class AllocatorSettings:
    """What the allocator configuration asks of the model: expandable segments (modelled), and the options
    set that it does not model (named, so a report can say its reserved figures assume them unset)."""

    expandable_segments: bool = False
    unmodelled: Tuple[str, ...] = ()

    @property
    def note(self) -> Optional[str]:
        if not self.unmodelled:
            return None
        return (
            f"allocator configuration sets {', '.join(self.unmodelled)}: the reserved figures model the allocator "
            "without them"
        )


def settings_from_env(environ: Optional[Mapping[str, str]] = None) -> AllocatorSettings:
    """PYTORCH_ALLOC_CONF (newer torch), else PYTORCH_CUDA_ALLOC_CONF: comma-separated `key:value` pairs, read
    as torch reads them (`expandable_segments:True`, exactly; `backend:cudaMallocAsync` is another allocator)."""
    env = os.environ if environ is None else environ
    text = env.get("PYTORCH_ALLOC_CONF") or env.get("PYTORCH_CUDA_ALLOC_CONF") or ""
    options: Dict[str, str] = {}
    for pair in text.split(","):
        key, _, value = pair.partition(":")
        if key.strip():
            options[key.strip()] = value.strip()
    unmodelled = [key for key in _UNMODELLED if key in options]
    if options.get("backend") == "cudaMallocAsync":
        unmodelled.append("backend:cudaMallocAsync")
    return AllocatorSettings(options.get("expandable_segments") == "True", tuple(unmodelled))


class Block:
    """One block of a segment: its bytes, where it sits, and its neighbours in the segment (for merging).
    A plain slotted class: a replay makes and reads hundreds of thousands of them."""

    __slots__ = ("address", "size", "segment", "small", "allocated", "prev", "next")

    def __init__(
        self,
        address: int,
        size: int,
        segment: int,
        small: bool,
        allocated: bool = False,
        prev: Optional["Block"] = None,
        next: Optional["Block"] = None,
    ) -> None:
        self.address, self.size, self.segment, self.small = address, size, segment, small
        self.allocated, self.prev, self.next = allocated, prev, next


@dataclass
class SegmentInfo:
    """One cudaMalloc'd segment at the end of the replay (and how much of it was in use at the allocated peak)."""

    address: int
    size: int
    pool: str  # "small" | "large"
    allocated_at_peak: int = 0


@dataclass
class OutOfMemory:
    """A request the allocator could not serve even after releasing its cache: PyTorch raises here."""

    request: int  # the replay's request number (1-based)
    nbytes: int  # bytes asked for
    needed: int  # the cudaMalloc (or pages to map) that failed
    allocated: int  # at the failure, after the release
    reserved: int


@dataclass
class AllocatorResult:
    peak_allocated: int
    peak_reserved: int
    final_allocated: int
    final_reserved: int
    segments: List[SegmentInfo] = field(default_factory=list)
    requests: int = 0
    limit: Optional[int] = None  # the bytes the allocator could reserve, when the replay had a limit
    retries: int = 0  # num_alloc_retries: times it freed its cache and retried
    ooms: List[OutOfMemory] = field(default_factory=list)  # past one, the replay went on as if memory were there
    # the malloc/free stream replayed, when its caller kept it (trace_summary.replay_device), to replay it again
    events: List["Event"] = field(default_factory=list, compare=False, repr=False)

    @property
    def fits(self) -> bool:
        """No request ran out of memory (always true without a limit)."""
        return not self.ooms

    @property
    def fragmentation(self) -> float:
        """Share of the reserved peak that was not allocated at the allocated peak (cached / split waste)."""
        return 1.0 - self.peak_allocated / self.peak_reserved if self.peak_reserved else 0.0


class CachingAllocatorModel:
    """Feed it `malloc(handle, nbytes)` and `free(handle)` calls in program order; read the stats."""

    def __init__(self, expandable: bool = False, limit: Optional[int] = None) -> None:
        self.expandable = expandable
        self.limit = limit
        self.retries = 0
        self.ooms: List[OutOfMemory] = []
        self._ends: Dict[bool, Block] = {}  # expandable: each pool's last mapped block
        self._pool_segment: Dict[bool, int] = {}  # expandable: each pool's segment, as an index into _segments
        self._free: Dict[bool, List[Tuple[int, int]]] = {True: [], False: []}  # sorted (size, address)
        self._by_address: Dict[int, Block] = {}
        self._live: Dict[Hashable, Block] = {}
        self._segments: List[Tuple[int, int, bool]] = []  # (address, size, small)
        self._next_address = 0
        self.allocated = 0
        self.reserved = 0
        self.peak_allocated = 0
        self.peak_reserved = 0
        self.requests = 0
        self._at_peak: Dict[int, int] = {}  # segment address -> allocated bytes at the allocated peak
        self._live_by_segment: Dict[int, int] = {}  # segment address -> allocated bytes now
        self._peak_unread = False  # a new allocated peak whose per-segment bytes are read at the next free

    # --- free lists -------------------------------------------------------------------------------

    def _insert_free(self, block: Block) -> None:
        insort(self._free[block.small], (block.size, block.address))

    def _remove_free(self, block: Block) -> None:
        pool = self._free[block.small]
        key = (block.size, block.address)
        index = bisect_left(pool, key)
        if index < len(pool) and pool[index] == key:
            del pool[index]

    # --- segments ---------------------------------------------------------------------------------

    def _new_segment(self, nbytes: int, rounded: int, small: bool) -> Block:
        size = segment_size(rounded)
        self._make_room(nbytes, lambda: size)
        address = self._next_address
        self._next_address += size
        self._segments.append((address, size, small))
        self.reserved += size
        self.peak_reserved = max(self.peak_reserved, self.reserved)
        block = Block(address=address, size=size, segment=address, small=small)
        self._by_address[address] = block
        return block

    def _map_more(self, nbytes: int, rounded: int, small: bool) -> Block:
        """Expandable segments: grow the pool's one segment at its end by whole pages, merged with a free
        block already there (CUDACachingAllocator's try_allocate_expandable_block)."""
        page = SMALL_BUFFER if small else LARGE_BUFFER
        self._make_room(nbytes, lambda: self._pages_needed(rounded, small))
        if small not in self._pool_segment:  # address space far larger than any GPU, mapped from its start
            self._pool_segment[small] = len(self._segments)
            self._segments.append((self._next_address, 0, small))
            self._next_address += 1 << 46
        index = self._pool_segment[small]
        address, mapped, _ = self._segments[index]
        end = self._ends.get(small)
        spare = end.size if end is not None and not end.allocated else 0
        pages = page * ((rounded - spare + page - 1) // page)
        self._segments[index] = (address, mapped + pages, small)
        self.reserved += pages
        self.peak_reserved = max(self.peak_reserved, self.reserved)
        if end is not None and spare:
            self._remove_free(end)
            end.size += pages
            return end
        block = Block(address=address + mapped, size=pages, segment=address, small=small, prev=end)
        if end is not None:
            end.next = block
        self._by_address[block.address] = block
        self._ends[small] = block
        return block

    def _pages_needed(self, rounded: int, small: bool) -> int:
        """Expandable segments: the bytes _map_more would map for `rounded` (a free end block counts)."""
        page = SMALL_BUFFER if small else LARGE_BUFFER
        end = self._ends.get(small)
        spare = end.size if end is not None and not end.allocated else 0
        return page * ((rounded - spare + page - 1) // page)

    def empty_cache(self) -> None:
        """torch.cuda.empty_cache(): emptyCache is release_cached_blocks, as in the last resort below."""
        self._release_cached()

    # --- the last resort (a device limit) ---------------------------------------------------------

    def _make_room(self, nbytes: int, needed: Callable[[], int]) -> None:
        """DeviceCachingAllocator::malloc when alloc_block fails: release_cached_blocks, then alloc_block again
        as a retry (num_alloc_retries); if that fails, an OOM (num_ooms). The model goes on past an OOM (the
        segment is reserved over the limit) so that the replay ends; `ooms` says it would have raised."""
        if not self._over(needed()):
            return
        self._release_cached()
        self.retries += 1
        if self._over(needed()):
            self.ooms.append(OutOfMemory(self.requests, nbytes, needed(), self.allocated, self.reserved))

    def _over(self, size: int) -> bool:
        return self.limit is not None and self.reserved + size > self.limit

    def _release_cached(self) -> None:
        """release_cached_blocks: release_blocks(large_blocks), then (small_blocks). cudaMalloc'd segments
        are freed only when wholly free (a free block with no prev and no next); with expandable segments
        unmap_block returns the free pages, of which the model unmaps those at each pool's mapped end."""
        for small in (False, True):
            if self.expandable:
                self._unmap_end(small)
                continue
            for _, address in list(self._free[small]):
                block = self._by_address[address]
                if block.prev is None and block.next is None:
                    self._release_segment(block)

    def _release_segment(self, block: Block) -> None:
        """release_block: cudaFree a wholly free segment."""
        self._remove_free(block)
        del self._by_address[block.address]
        self.reserved -= block.size
        self._segments.remove((block.address, block.size, block.small))

    def _unmap_end(self, small: bool) -> None:
        """unmap_block on the free block at the pool's mapped end: its whole pages go back to CUDA. Free
        blocks inside the segment give back their whole pages in PyTorch too; the model, which maps only at
        the end, keeps them (an upper bound on what is reserved after the release)."""
        end = self._ends.get(small)
        if end is None or end.allocated:
            return
        page = SMALL_BUFFER if small else LARGE_BUFFER
        index = self._pool_segment[small]
        base, mapped, _ = self._segments[index]
        first_page = base + page * ((end.address - base + page - 1) // page)
        unmapped = base + mapped - first_page
        if unmapped <= 0:
            return
        self._remove_free(end)
        self._segments[index] = (base, mapped - unmapped, small)
        self.reserved -= unmapped
        end.size -= unmapped
        if end.size:
            self._insert_free(end)
            return
        del self._by_address[end.address]
        if end.prev is not None:  # allocated: a free one would have merged with `end`
            end.prev.next = None
            self._ends[small] = end.prev
        else:
            del self._ends[small]

    # --- the API ----------------------------------------------------------------------------------

    def malloc(self, handle: Hashable, nbytes: int) -> Optional[Block]:
        """Allocate for `handle`; a 0-byte request gets no block (as in CUDA: a null pointer)."""
        if nbytes <= 0:
            return None
        live = self._live
        if handle in live:
            raise ValueError(f"handle {handle!r} is already allocated")
        self.requests += 1
        rounded = round_size(nbytes)
        small = is_small(rounded)
        pool = self._free[small]
        index = bisect_left(pool, (rounded, -1))  # the best fit: smallest size, then lowest address
        if index < len(pool):
            block = self._by_address[pool.pop(index)[1]]
        else:
            grow = self._map_more if self.expandable else self._new_segment
            block = grow(nbytes, rounded, small)
        size = block.size
        remaining = size - rounded
        if should_split(size, rounded, small, self.expandable):
            after = block.next
            rest = Block(block.address + rounded, remaining, block.segment, small, False, block, after)
            if after is not None:
                after.prev = rest
            elif self.expandable and self._ends.get(small) is block:
                self._ends[small] = rest
            block.next = rest
            block.size = size = rounded
            self._by_address[rest.address] = rest
            self._insert_free(rest)
        block.allocated = True
        live[handle] = block
        by_segment = self._live_by_segment
        segment = block.segment
        by_segment[segment] = by_segment.get(segment, 0) + size
        self.allocated += size
        if self.allocated > self.peak_allocated:
            self.peak_allocated = self.allocated
            self._peak_unread = True  # only allocations follow until the next free: read there, once
        return block

    @property
    def live_handles(self) -> "Dict[Hashable, Block]":
        """The handles allocated now (read-only view: a dict of handle -> block)."""
        return self._live

    def free(self, handle: Hashable) -> None:
        block = self._live.pop(handle, None)
        if block is None:
            return  # a 0-byte allocation, or a storage that lived on the host
        if self._peak_unread:
            self._read_peak()
        self._live_by_segment[block.segment] -= block.size
        self.allocated -= block.size
        block.allocated = False
        before, after = block.prev, block.next
        if before is not None and not before.allocated:
            self._remove_free(before)
            block = self._merge(before, block)
        if after is not None and not after.allocated:
            self._remove_free(after)
            block = self._merge(block, after)
        self._insert_free(block)

    def _merge(self, first: Block, second: Block) -> Block:
        """`second` (the block just after `first` in their segment) joins `first`."""
        if self.expandable and self._ends.get(first.small) is second:
            self._ends[first.small] = first
        first.size += second.size
        after = second.next
        first.next = after
        if after is not None:
            after.prev = first
        del self._by_address[second.address]
        return first

    def _read_peak(self) -> None:
        """The allocated bytes by segment at the last allocated peak, read before the first free after it."""
        if self._peak_unread:
            self._at_peak = {segment: size for segment, size in self._live_by_segment.items() if size}
            self._peak_unread = False

    def result(self) -> AllocatorResult:
        self._read_peak()
        segments = [
            SegmentInfo(address, size, "small" if small else "large", self._at_peak.get(address, 0))
            for address, size, small in self._segments
            if size  # an expandable pool unmapped whole by the last resort
        ]
        return AllocatorResult(
            self.peak_allocated,
            self.peak_reserved,
            self.allocated,
            self.reserved,
            segments,
            self.requests,
            self.limit,
            self.retries,
            list(self.ooms),
        )


Event = Tuple[str, Hashable, int]  # ("alloc", handle, nbytes) | ("free", handle, 0)


def replay(events: Iterable[Event], expandable: bool = False, limit: Optional[int] = None) -> AllocatorResult:
    """Run an alloc/free stream through a fresh allocator model (empty cache, as after `empty_cache()`); with
    `limit`, the bytes it may reserve, as the allocator does on a device of that size."""
    model = CachingAllocatorModel(expandable, limit)
    for kind, handle, nbytes in events:
        if kind == "alloc":
            model.malloc(handle, nbytes)
        elif kind == "free":
            model.free(handle)
        else:
            raise ValueError(f"unknown allocator event {kind!r}")
    return model.result()
