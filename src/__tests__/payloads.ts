/**
 * Payloads of the main-thread actions and inline outputs, as the kernel side wrote them: data/*.json were
 * produced by a real ipykernel with CPU-only torch 2.13 (`frontend.last_oom()` after raising PyTorch 2.x's
 * OOM message, `frontend.oom_from_text()` of a PyTorch 1.x message, `frontend.clear()`, `%gpumem clear`).
 * The GPU variants are built from them by hand, field by field as clear.schema.json describes.
 */
import type { IClearPayload, IOomPayload, IOomStep } from '../wire/protocol';
import clearCpuJson from './data/clear_cpu.json';
import clearHoldersJson from './data/clear_holders_cpu.json';
import oom1xJson from './data/oom_1x.json';
import oom2xJson from './data/oom_2x.json';
import { GIB, MIB, OTHER_KERNEL_ID } from './fixtures';

function clone<T>(value: unknown): T {
  return JSON.parse(JSON.stringify(value)) as T;
}

/** torch.OutOfMemoryError with PyTorch 2.x's message (12 steps, cheapest first). */
export function oom2x(): IOomPayload {
  return clone(oom2xJson);
}

/** RuntimeError "CUDA out of memory" of PyTorch 1.x, parsed from text; fragmentation suggested. */
export function oom1x(): IOomPayload {
  return clone(oom1xJson);
}

/** A step that shuts down another notebook's kernel, as the kernel lists one that holds memory. */
export function shutdownStep(): IOomStep {
  return {
    id: `shutdown-${OTHER_KERNEL_ID.slice(0, 8)}`,
    title: `Shut down the notebook kernel ${OTHER_KERNEL_ID.slice(0, 8)} (4.00 GiB)`,
    detail: 'Another Jupyter kernel of this server (PID 2345, python) holds 4.00 GiB on this GPU.',
    action: 'shutdown-kernel',
    kernel_id: OTHER_KERNEL_ID,
    code: null
  };
}

/** The 2.x checklist with another kernel on the GPU. */
export function oomWithOtherKernel(): IOomPayload {
  const payload = oom2x();
  payload.diagnosis.other_processes = [
    {
      pid: 2345,
      used: 4 * GIB,
      name: 'python',
      kernel_id: OTHER_KERNEL_ID,
      child_of_kernel: false,
      source: 'probe'
    }
  ];
  payload.steps.splice(2, 1, shutdownStep());
  return payload;
}

/** `frontend.clear()` on a CPU-only kernel right after an error: the traceback was dropped. */
export function clearCpu(): IClearPayload {
  return clone(clearCpuJson);
}

/** `%gpumem clear` on a CPU-only kernel holding `x = torch.zeros(10)`: the host-side list. */
export function clearHoldersCpu(): IClearPayload {
  return clone(clearHoldersJson);
}

/** A clear on a GPU: 3 GiB of cached blocks returned, a traceback and an Out entry dropped, `model` stays. */
export function clearGpu(): IClearPayload {
  return {
    version: 1,
    dry_run: false,
    torch_imported: true,
    cuda_initialized: true,
    traceback_sources: ['sys.last_type/last_value/last_traceback', 'InteractiveTB.tb'],
    traceback_frames: 7,
    traceback_freed: {
      name: 'traceback',
      kind: 'traceback',
      type_name: 'traceback',
      bytes: 2 * GIB,
      by_device: { 'cuda:0': 2 * GIB },
      tensors: 12,
      shape: null,
      dtype: null
    },
    output_cache: [
      {
        name: 'Out[3]',
        kind: 'tensor',
        type_name: 'Tensor',
        bytes: 512 * MIB,
        by_device: { 'cuda:0': 512 * MIB },
        tensors: 1,
        shape: [128, 1024, 1024],
        dtype: 'float32'
      }
    ],
    output_cache_entries: 1,
    deleted: [],
    gc_collected: 31,
    emptied_cache: true,
    devices: [
      {
        device: 'cuda:0',
        name: 'NVIDIA GeForce RTX 4080 SUPER',
        allocated_before: 6 * GIB,
        allocated_after: 3 * GIB + 512 * MIB,
        reserved_before: 8 * GIB,
        reserved_after: 4 * GIB,
        this_kernel_before: 8 * GIB + 512 * MIB,
        this_kernel_after: 4 * GIB + 512 * MIB
      }
    ],
    host_rss_before: 3 * GIB,
    host_rss_after: 3 * GIB,
    holders: [
      {
        name: 'model',
        kind: 'module',
        type_name: 'ResNet',
        bytes: 3 * GIB,
        by_device: { 'cuda:0': 3 * GIB },
        tensors: 161,
        shape: null,
        dtype: null
      },
      {
        name: 'batch',
        kind: 'tensor',
        type_name: 'Tensor',
        bytes: 512 * MIB,
        by_device: { 'cuda:0': 512 * MIB },
        tensors: 1,
        shape: [64, 3, 224, 224],
        dtype: 'float32'
      }
    ],
    holders_more: 2,
    notes: [],
    reclaimed: { 'cuda:0': 4 * GIB }
  };
}
