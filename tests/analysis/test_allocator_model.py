"""The caching-allocator model against PyTorch's rounding rules and hand-computed sequences."""

from gpumem_kernel.analysis.allocator.caching_allocator import (
    LARGE_BUFFER,
    SMALL_BUFFER,
    CachingAllocatorModel,
    replay,
    round_size,
    segment_size,
    should_split,
)

KiB, MiB = 1 << 10, 1 << 20


def test_round_size_is_512_byte_granular() -> None:
    assert round_size(1) == 512
    assert round_size(511) == 512
    assert round_size(512) == 512
    assert round_size(513) == 1024
    assert round_size(3 * MiB + 1) == 3 * MiB + 512


def test_segment_sizes_follow_the_three_size_classes() -> None:
    assert segment_size(512) == SMALL_BUFFER == 2 * MiB
    assert segment_size(1 * MiB) == 2 * MiB  # <= 1 MiB: small pool
    assert segment_size(1 * MiB + 512) == LARGE_BUFFER == 20 * MiB  # 1-10 MiB: a 20 MiB segment
    assert segment_size(10 * MiB - 512) == 20 * MiB
    assert segment_size(10 * MiB) == 10 * MiB  # >= 10 MiB: rounded to 2 MiB
    assert segment_size(11 * MiB) == 12 * MiB
    assert segment_size(100 * MiB + 512) == 102 * MiB


def test_split_thresholds_differ_by_pool() -> None:
    assert should_split(2 * MiB, 2 * MiB - 512, small=True)  # 512 B left: small pool splits
    assert not should_split(1024, 1024, small=True)
    assert not should_split(20 * MiB, 19 * MiB, small=False)  # 1 MiB left is not > 1 MiB
    assert should_split(20 * MiB, 19 * MiB - 512, small=False)


def test_small_requests_share_a_2_mib_segment() -> None:
    model = CachingAllocatorModel()
    model.malloc("a", 1000)
    model.malloc("b", 1000)
    assert (model.allocated, model.reserved) == (2048, 2 * MiB)
    model.free("a")
    model.malloc("c", 600)  # best fit: a's freed 1024-byte block, not the big remainder
    assert model._live["c"].address == model._live["b"].address - 1024
    assert (model.allocated, model.reserved) == (2048, 2 * MiB)


def test_large_pool_unsplit_block_is_handed_out_whole() -> None:
    model = CachingAllocatorModel()
    model.malloc("x", 5 * MiB)  # 20 MiB segment, split: 15 MiB free
    model.malloc("y", 14 * MiB + 512 * KiB)  # 15 MiB block, 0.5 MiB left: not split
    assert model._live["y"].size == 15 * MiB
    assert (model.allocated, model.reserved) == (20 * MiB, 20 * MiB)
    model.malloc("z", 1536 * KiB)  # no free large block: a new 20 MiB segment
    assert model.reserved == 40 * MiB
    assert model.peak_allocated == 20 * MiB + 1536 * KiB


def test_no_cross_pool_reuse_and_merging_of_neighbours() -> None:
    model = CachingAllocatorModel()
    model.malloc("x", 5 * MiB)
    model.malloc("y", 5 * MiB)
    model.free("x")
    model.free("y")  # merges with x and the 10 MiB remainder: one free 20 MiB block
    model.malloc("s", 4096)  # small request: its own 2 MiB segment, never the free large block
    assert model.reserved == 22 * MiB
    model.malloc("big", 18 * MiB)  # fits the merged 20 MiB block (2 MiB left > 1 MiB: split)
    assert model.reserved == 22 * MiB
    assert model._live["big"].size == 18 * MiB


def test_cached_segments_stay_reserved_and_peaks_are_kept() -> None:
    result = replay([("alloc", 1, 30 * MiB), ("alloc", 2, 512), ("free", 1, 0), ("free", 2, 0), ("alloc", 3, 12 * MiB)])
    assert result.peak_allocated == 30 * MiB + 512
    assert result.peak_reserved == 30 * MiB + 2 * MiB  # the 12 MiB request reuses the cached 30 MiB segment
    assert result.final_allocated == 12 * MiB  # split off the cached block: the 18 MiB rest stays free
    assert {s.pool for s in result.segments} == {"small", "large"}


def test_zero_byte_requests_get_no_block() -> None:
    result = replay([("alloc", "e", 0), ("free", "e", 0)])
    assert (result.peak_allocated, result.peak_reserved, result.requests) == (0, 0, 0)


# --- expandable segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True) ---------------------------------


def test_expandable_segments_map_20_mib_pages_at_the_end_and_split_any_rest() -> None:
    model = CachingAllocatorModel(expandable=True)
    model.malloc("x", 5 * MiB)  # one 20 MiB page mapped: 15 MiB free at the end
    assert (model.allocated, model.reserved) == (5 * MiB, 20 * MiB)
    model.malloc("y", 14 * MiB + 512 * KiB)  # the end block, split: 512 KiB left (by default handed out whole)
    assert model._live["y"].size == 14 * MiB + 512 * KiB
    model.malloc("z", 1536 * KiB)  # 512 KiB free at the end + one more page, contiguous with it
    assert model.reserved == 40 * MiB
    assert model._live["z"].address == model._live["y"].address + 14 * MiB + 512 * KiB
    assert [s.size for s in model.result().segments] == [40 * MiB]  # one segment, grown


def test_expandable_segments_cannot_use_a_hole_before_the_end() -> None:
    model = CachingAllocatorModel(expandable=True)
    model.malloc("a", 12 * MiB)  # page 1: a, 8 MiB free
    model.malloc("b", 12 * MiB)  # 8 MiB + page 2: b, 16 MiB free at the end
    model.free("a")  # a 12 MiB hole at the start
    model.malloc("c", 20 * MiB)  # neither the hole nor the 16 MiB end fits: a third page extends the end
    assert model.reserved == 60 * MiB
    assert model._live["c"].address == model._live["b"].address + 12 * MiB
    model.free("b")
    model.free("c")  # everything merges back into one free block as long as the mapping
    model.malloc("d", 59 * MiB)
    assert model.reserved == 60 * MiB and model._live["d"].address == 0


def test_expandable_small_pool_grows_in_2_mib_pages() -> None:
    result = replay([("alloc", i, 600 * KiB) for i in range(7)], expandable=True)
    assert result.peak_allocated == 7 * 600 * KiB
    assert result.peak_reserved == 6 * MiB  # 4200 KiB in 2 MiB pages, one segment
    assert len(result.segments) == 1


def test_allocator_settings_are_read_as_torch_reads_them() -> None:
    from gpumem_kernel.analysis.allocator.caching_allocator import settings_from_env

    assert settings_from_env({}) == settings_from_env({"PYTORCH_CUDA_ALLOC_CONF": ""})
    assert not settings_from_env({}).expandable_segments and settings_from_env({}).note is None
    both = settings_from_env({"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True, max_split_size_mb:128"})
    assert both.expandable_segments and both.unmodelled == ("max_split_size_mb",)
    assert "max_split_size_mb" in (both.note or "")
    newer = {"PYTORCH_ALLOC_CONF": "expandable_segments:True", "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:False"}
    assert settings_from_env(newer).expandable_segments  # the newer name wins
    assert settings_from_env({"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"}).unmodelled == (
        "backend:cudaMallocAsync",
    )


# --- the last resort under a device limit (DeviceCachingAllocator::malloc, release_cached_blocks) -----------


def _fragmented() -> list:
    """a's 20 MiB segment is cached whole when c (30 MiB) needs a new segment: 70 MiB reserved unlimited."""
    return [
        ("alloc", "a", 20 * MiB),
        ("alloc", "b", 20 * MiB),
        ("free", "a", 0),
        ("alloc", "c", 30 * MiB),
        ("free", "b", 0),
        ("free", "c", 0),
    ]


def test_release_and_retry_fits_where_the_unlimited_model_goes_over() -> None:
    unlimited = replay(_fragmented())
    assert unlimited.peak_reserved == 70 * MiB  # over a 60 MiB device: the model without the last resort says OOM
    limited = replay(_fragmented(), limit=60 * MiB)
    assert limited.fits and limited.ooms == []
    assert limited.retries == 1  # num_alloc_retries: a's cached segment was cudaFree'd, then c's cudaMalloc retried
    assert limited.peak_reserved == 50 * MiB <= 60 * MiB
    assert limited.peak_allocated == unlimited.peak_allocated == 50 * MiB
    assert sorted(s.size for s in limited.segments) == [20 * MiB, 30 * MiB]  # b's and c's; a's went back to CUDA


def test_the_release_frees_cached_segments_of_both_pools_only_when_wholly_free() -> None:
    model = CachingAllocatorModel(limit=44 * MiB)
    model.malloc("s", 1000)  # a 2 MiB small segment
    model.malloc("x", 5 * MiB)  # a 20 MiB segment, split: 15 MiB free but in a segment in use
    model.malloc("y", 16 * MiB)  # does not fit x's 15 MiB rest: a 16 MiB segment
    model.free("s")
    model.free("y")
    assert model.reserved == 38 * MiB
    model.malloc("z", 20 * MiB)  # 38 + 20 > 44: s's and y's segments are released, x's (split) stays
    assert (model.retries, model.reserved, model.ooms) == (1, 40 * MiB, [])


def test_an_oom_is_recorded_when_even_the_release_does_not_fit() -> None:
    events = [("alloc", "x", 5 * MiB), ("alloc", "big", 30 * MiB), ("free", "big", 0), ("free", "x", 0)]
    result = replay(events, limit=40 * MiB)
    assert not result.fits and result.retries == 1  # the retry is counted whether or not it succeeds
    (oom,) = result.ooms
    assert (oom.request, oom.nbytes, oom.needed) == (2, 30 * MiB, 30 * MiB)
    assert (oom.allocated, oom.reserved) == (5 * MiB, 20 * MiB)  # x's split segment cannot be released
    assert result.peak_reserved == 50 * MiB  # the replay went on past the OOM, as if the memory were there


def test_without_a_limit_or_under_it_the_replay_is_unchanged() -> None:
    events = _fragmented() + [("alloc", "d", 700), ("alloc", "e", 3 * MiB), ("free", "d", 0)]
    unlimited = replay(events)
    assert (unlimited.limit, unlimited.retries, unlimited.ooms) == (None, 0, [])
    roomy = replay(events, limit=unlimited.peak_reserved)  # exactly enough: no release
    assert roomy.retries == 0 and roomy.limit == unlimited.peak_reserved
    assert roomy.segments == unlimited.segments
    assert (roomy.peak_reserved, roomy.final_reserved) == (unlimited.peak_reserved, unlimited.final_reserved)


def test_expandable_segments_unmap_the_other_pools_free_pages() -> None:
    smalls = [("alloc", f"s{i}", 1 * MiB) for i in range(10)] + [("free", f"s{i}", 0) for i in range(10)]
    events = smalls + [("alloc", "L", 40 * MiB), ("free", "L", 0)]
    assert replay(events, expandable=True).peak_reserved == 50 * MiB  # small pages stay mapped
    limited = replay(events, expandable=True, limit=45 * MiB)
    assert limited.fits and limited.retries == 1  # unmap_block gave back the small pool's 10 free 2 MiB pages
    assert limited.peak_reserved == 40 * MiB
    assert [(s.pool, s.size) for s in limited.segments] == [("large", 40 * MiB)]  # the small pool, unmapped whole


def test_expandable_segments_grow_over_their_own_free_end_without_a_retry() -> None:
    events = [("alloc", "a", 30 * MiB), ("free", "a", 0), ("alloc", "b", 50 * MiB)]
    limited = replay(events, expandable=True, limit=60 * MiB)
    assert (limited.retries, limited.peak_reserved, limited.fits) == (0, 60 * MiB, True)  # 40 mapped + 20 more
