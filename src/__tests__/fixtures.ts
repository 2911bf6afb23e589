/**
 * Messages exactly as `gpumem_kernel/wire/schemas/README.md` (protocol v1) describes them. The lead cross-checks
 * these against the Python JSON Schemas: keep every field present, null where "not measured".
 */
import type {
  IDevice,
  IErrorMessage,
  IHello,
  IHistory,
  IReply,
  IRequestResults,
  ISample
} from '../wire/protocol';

export const GIB = 1024 ** 3;
export const MIB = 1024 ** 2;
/** The total of an RTX 4080 SUPER (15.99 GiB). */
export const DEVICE_TOTAL = 17171480576;

export const KERNEL_ID = '8f0c5e2a-1111-4c3e-9d7a-0123456789ab';
export const OTHER_KERNEL_ID = '3b9d0c7e-2222-4e8f-8a6b-fedcba987654';
export const UNKNOWN_KERNEL_ID = 'deadbeef-3333-4a4a-8b8b-000000000000';

export const hello: IHello = {
  type: 'hello',
  protocol: 1,
  version: '0.1.0',
  pid: 1234,
  capabilities: ['sample', 'snapshot', 'history', 'configure', 'children', 'processes', 'terminate'],
  interval: 1.0,
  history_seconds: 600,
  python: '3.11.7',
  ipykernel: '7.4.0',
  torch: '2.13.0+cu124',
  create_time: 1763854990.12
};

/** A hello from a kernel package older than `create_time` (the field is optional). */
export function helloWithoutCreateTime(): IHello {
  const { create_time: _, ...rest } = hello;
  return rest;
}

/** cuda:0, a 16 GiB card on which torch has initialised CUDA; another notebook and a script share it. */
export function device0(): IDevice {
  return {
    nvml_index: 0,
    cuda_index: 0,
    name: 'NVIDIA GeForce RTX 4080 SUPER',
    uuid: 'GPU-5b1c2d3e-aaaa-bbbb-cccc-0123456789ab',
    mig: false,
    total: DEVICE_TOTAL,
    used: 12 * GIB,
    free: DEVICE_TOTAL - 12 * GIB,
    util_gpu: 37,
    util_mem: 12,
    compute_capability: '8.9',
    sm_count: 80,
    this_kernel: 6 * GIB + 512 * MIB,
    allocator: {
      allocated: 4 * GIB,
      reserved: 6 * GIB,
      peak_allocated: 5 * GIB,
      peak_reserved: 6 * GIB,
      num_ooms: 0,
      num_alloc_retries: 0
    },
    processes: [
      { pid: 1234, name: 'python', used: 6 * GIB + 512 * MIB, kernel_id: KERNEL_ID, this_kernel: true },
      { pid: 2345, name: 'python', used: 4 * GIB, kernel_id: OTHER_KERNEL_ID, this_kernel: false },
      { pid: 3456, name: 'train.py', used: 1 * GIB + 512 * MIB, kernel_id: null, this_kernel: false },
      // A host PID seen from a container: NVML lists it, the kernel cannot see its name or size.
      { pid: 4567, name: null, used: null, kernel_id: null, this_kernel: false }
    ],
    power_mw: 285125,
    power_limit_mw: 320000,
    energy_mj: 123456789,
    power_note: null
  };
}

/** Host PIDs in a container: NVML lists them, the kernel's own PID there is 57. */
export const HOST_PID = 4000000;
export const OTHER_HOST_PID = 4000100;
export const CHILD_HOST_PID = 4000200;
export const EXTERNAL_HOST_PID = 3900000;

/**
 * cuda:0 seen from a container: this kernel under its host PID (confirmed), a `!python train.py` started from
 * the notebook (local PID 88), and another container's process.
 */
export function containerDevice(): IDevice {
  return {
    ...device0(),
    used: 48 * GIB,
    free: 80 * GIB - 48 * GIB,
    total: 80 * GIB,
    this_kernel: 6 * GIB + 512 * MIB,
    notebook_processes: 8 * GIB,
    uncertain: null,
    processes: [
      {
        pid: HOST_PID,
        name: null,
        used: 6 * GIB + 512 * MIB,
        kernel_id: null,
        this_kernel: true,
        relation: 'this_kernel',
        note: "host PID of this kernel (local PID 57): NVML's figure follows PyTorch's reserved memory",
        local_pid: 57,
        create_time: null,
        cmdline: null
      },
      {
        pid: CHILD_HOST_PID,
        name: null,
        used: 8 * GIB,
        kernel_id: null,
        this_kernel: false,
        relation: 'notebook',
        note: 'host PID of process 88 started from this notebook',
        local_pid: 88,
        create_time: 1763855100.5,
        cmdline: 'python train.py --epochs 3'
      },
      {
        pid: EXTERNAL_HOST_PID,
        name: null,
        used: 30 * GIB,
        kernel_id: null,
        this_kernel: false,
        relation: 'external',
        note: null,
        local_pid: null,
        create_time: null,
        cmdline: null
      }
    ]
  };
}

/** The same GPU while two kernels initialised CUDA in the same second: this kernel is one of two host PIDs. */
export function ambiguousDevice(): IDevice {
  const device = containerDevice();
  const ambiguous = (pid: number): IDevice['processes'][number] => ({
    pid,
    name: null,
    used: 2 * GIB,
    kernel_id: null,
    this_kernel: false,
    relation: 'ambiguous',
    note: `this kernel is one of host PIDs ${HOST_PID}, ${OTHER_HOST_PID} (they cannot be told apart yet)`,
    local_pid: null,
    create_time: null,
    cmdline: null
  });
  return {
    ...device,
    this_kernel: null,
    notebook_processes: null,
    uncertain: 4 * GIB,
    allocator: null,
    processes: [ambiguous(HOST_PID), ambiguous(OTHER_HOST_PID), device.processes[2]]
  };
}

/** NVML device 1, hidden from this kernel by CUDA_VISIBLE_DEVICES=0. */
export function device1(): IDevice {
  return {
    nvml_index: 1,
    cuda_index: null,
    name: 'NVIDIA GeForce RTX 4080 SUPER',
    uuid: 'GPU-9f8e7d6c-dddd-eeee-ffff-ba9876543210',
    mig: false,
    total: DEVICE_TOTAL,
    used: 300 * MIB,
    free: DEVICE_TOTAL - 300 * MIB,
    util_gpu: null,
    util_mem: null,
    compute_capability: '8.9',
    sm_count: null,
    this_kernel: null,
    allocator: null,
    processes: []
  };
}

/** A MIG slice named in CUDA_VISIBLE_DEVICES: right after its GPU, with the GPU's nvml_index. */
export function migSlice(): IDevice {
  return {
    nvml_index: 1,
    cuda_index: 0,
    name: 'NVIDIA A100-SXM4-80GB MIG 3g.40gb',
    uuid: 'MIG-0a1b2c3d-4e5f-6789-abcd-ef0123456789',
    mig: true,
    total: 40 * GIB,
    used: 2 * GIB,
    free: 38 * GIB,
    util_gpu: null,
    util_mem: null,
    compute_capability: '8.0',
    sm_count: 42,
    this_kernel: 2 * GIB,
    allocator: null,
    processes: [{ pid: 1234, name: 'python', used: 2 * GIB, kernel_id: KERNEL_ID, this_kernel: true }]
  };
}

/** A device NVML could not read (every query failed). */
export function unreadableDevice(): IDevice {
  return {
    nvml_index: 2,
    cuda_index: null,
    name: null,
    uuid: null,
    mig: false,
    total: null,
    used: null,
    free: null,
    util_gpu: null,
    util_mem: null,
    compute_capability: null,
    sm_count: null,
    this_kernel: null,
    allocator: null,
    processes: []
  };
}

export function sample(seq = 42, time = 1763855000.12): ISample {
  return {
    type: 'sample',
    seq,
    time,
    gpu: {
      available: true,
      reason: null,
      driver_version: '550.54.15',
      cuda_driver_version: '12.4',
      visible_devices: '0',
      device_order: 'FASTEST_FIRST',
      devices: [device0(), device1()]
    },
    kernel: {
      pid: 1234,
      gpu_used: 6 * GIB + 512 * MIB,
      torch: { imported: true, version: '2.13.0+cu124', cuda_initialized: true }
    },
    host: {
      rss: 3 * GIB,
      total: 64 * GIB,
      available: 40 * GIB,
      children: { count: 2, rss: 1 * GIB },
      container_limit: null,
      container_usage: null
    },
    errors: []
  };
}

/** A machine without an NVIDIA driver. */
export function noGpuSample(seq = 1, time = 1763855000.0): ISample {
  return {
    type: 'sample',
    seq,
    time,
    gpu: {
      available: false,
      reason: 'NVIDIA driver library (libnvidia-ml.so.1) not found',
      driver_version: null,
      cuda_driver_version: null,
      visible_devices: null,
      device_order: 'FASTEST_FIRST',
      devices: []
    },
    kernel: {
      pid: 1234,
      gpu_used: null,
      torch: { imported: false, version: null, cuda_initialized: false }
    },
    host: {
      rss: 200 * MIB,
      total: 16 * GIB,
      available: 8 * GIB,
      children: { count: 0, rss: 0 },
      container_limit: 8589934592,
      container_usage: 2 * GIB
    },
    errors: ['nvmlInit: NVML Shared Library Not Found']
  };
}

export function history(): IHistory {
  return { type: 'history', samples: [sample(40, 1763854998.12), sample(41, 1763854999.12)] };
}

export const snapshotReply = (): IReply => ({
  type: 'reply',
  id: 'r-1',
  action: 'snapshot',
  result: sample(0, 1763855001.12) as unknown as IReply['result']
});

export const childrenResult = (): IRequestResults['children'] => ({
  children: [
    { pid: 4321, create_time: 1763855000.25, name: 'python', rss: 123456789, gpu_used: 0 },
    { pid: 4322, create_time: 1763855000.31, name: null, rss: null, gpu_used: null }
  ]
});

export const processesResult = (): IRequestResults['processes'] => ({
  processes: [
    {
      pid: 4321,
      create_time: 1763855000.25,
      alive: true,
      same_process: true,
      name: 'python',
      gpu_used: 536870912
    },
    { pid: 4322, create_time: 1763855000.31, alive: true, same_process: false, name: null, gpu_used: null },
    { pid: 4323, create_time: 1763855000.4, alive: false, same_process: false, name: null, gpu_used: null }
  ]
});

export const terminateResult = (): IRequestResults['terminate'] => ({
  terminated: [4321],
  refused: [{ pid: 1234, reason: 'this kernel' }]
});

export const configureReply = (id = 'r-1'): IReply => ({
  type: 'reply',
  id,
  action: 'configure',
  result: { interval: 0.5, history_seconds: 600 }
});

export const errorReply = (id: string | null = 'r-1'): IErrorMessage => ({
  type: 'error',
  id,
  code: 'unknown-action',
  message: 'unknown action "frobnicate"'
});

/** Deep copy through JSON, as the message would arrive over the wire. */
export function wire<T>(value: T): unknown {
  return JSON.parse(JSON.stringify(value)) as unknown;
}
