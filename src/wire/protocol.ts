/**
 * The `gpumem` comm protocol, version 1, as TypeScript types and runtime guards.
 *
 * This file mirrors `gpumem_kernel/wire/schemas/README.md` (and the JSON Schemas beside it) field by field; the
 * Python side mirrors the same document in `gpumem_kernel/protocol.py`. Sizes are integer bytes, times are
 * seconds since the epoch, percentages are 0–100, and a value that could not be measured is `null` (never
 * omitted). Change the README first, then both mirrors.
 */
import type { JSONObject } from '@lumino/coreutils';

import {
  allOf,
  arrayOf,
  arrayOfAtLeast,
  bool,
  bytes,
  type Check,
  constant,
  count,
  describeValue,
  int,
  intIn,
  isRecord,
  matching,
  nullable,
  num,
  numIn,
  object,
  oneOf,
  recordOf,
  str,
  strLength
} from './validate';

/** The protocol this extension speaks. A `hello` with another number is refused. */
export const PROTOCOL_VERSION = 1;

/** The comm target name the kernel registers. */
export const COMM_TARGET = 'gpumem';

// ---------------------------------------------------------------------------------------------------------
// browser → kernel

/** `comm_open` data: configures the kernel's sampler for this comm. */
export interface IOpenMessage {
  type: 'open';
  protocol: number;
  /** Seconds between samples, 0.1–60. */
  interval?: number;
  /** How much history the sampler keeps, 10–3600 s. */
  history_seconds?: number;
  /** Who is asking, e.g. "jupyterlab-gpumem 0.1.0" (shown in the kernel's logs). */
  client?: string;
}

/** The request actions of protocol v1. */
export type RequestAction =
  'snapshot' | 'history' | 'configure' | 'children' | 'processes' | 'terminate' | 'ping';

/** A process named so that a reused PID is told apart: its PID and psutil's start time. */
export interface IProcessRef {
  pid: number;
  /** Seconds since the epoch. */
  create_time: number;
}

/** `args` of each request action. */
export interface IRequestArgs {
  snapshot: Record<string, never>;
  history: Record<string, never>;
  configure: { interval?: number; history_seconds?: number };
  children: Record<string, never>;
  /** At most 1024 processes. */
  processes: { pids: IProcessRef[] };
  terminate: { pids: IProcessRef[] };
  /** "Still here": a comm the kernel has not heard from for a while is dropped. */
  ping: Record<string, never>;
}

/** A request sent over the open comm; answered by a `reply` or an `error` with the same id. */
export interface IRequestMessage {
  type: 'request';
  /** `r-<n>`, unique per comm. */
  id: string;
  action: RequestAction;
  args: JSONObject;
}

// ---------------------------------------------------------------------------------------------------------
// kernel → browser

/** Sent once, right after the comm opens. */
export interface IHello {
  type: 'hello';
  protocol: number;
  /** Version of the `jupyterlab-gpumem` Python package in the kernel. */
  version: string;
  pid: number;
  capabilities: string[];
  interval: number;
  history_seconds: number;
  python: string;
  ipykernel: string | null;
  torch: string | null;
  /**
   * Start time of the kernel process (seconds since the epoch); with `pid` it names this kernel in
   * `processes`/`terminate` after a restart. Added without a protocol bump: older kernels omit it.
   */
  create_time?: number | null;
}

/** What the sampler kept before this comm opened, oldest first. */
export interface IHistory {
  type: 'history';
  samples: ISample[];
}

/** The PyTorch caching allocator of this kernel on one device (only once torch has initialised CUDA). */
export interface IAllocator {
  allocated: number;
  reserved: number;
  peak_allocated: number;
  peak_reserved: number;
  num_ooms: number;
  num_alloc_retries: number;
}

/** One process holding memory on a device, as NVML lists it. */
export interface IGpuProcess {
  pid: number;
  /** null when the PID is not visible here (e.g. a host PID seen from a container). */
  name: string | null;
  /** Bytes; null where NVML cannot tell (e.g. some containers / WDDM). */
  used: number | null;
  /** The Jupyter kernel id, when the process's command line names a `kernel-<id>.json`. */
  kernel_id: string | null;
  /** True for the kernel that sends this sample. */
  this_kernel: boolean;
}

/**
 * One GPU of the machine, in NVML order. A MIG slice named in CUDA_VISIBLE_DEVICES is its own device right
 * after its GPU, with the GPU's `nvml_index` and `mig: true` (so `nvml_index` alone is not unique).
 */
export interface IDevice {
  nvml_index: number;
  /** torch's `cuda:N` in this kernel; null when CUDA_VISIBLE_DEVICES hides the device. */
  cuda_index: number | null;
  name: string | null;
  uuid: string | null;
  mig: boolean;
  /** Bytes; null when the NVML query failed. */
  total: number | null;
  used: number | null;
  free: number | null;
  util_gpu: number | null;
  util_mem: number | null;
  compute_capability: string | null;
  /** From torch once CUDA is initialised; NVML knows it only for MIG slices. */
  sm_count: number | null;
  /** NVML's figure for this kernel's PID on this device (includes the CUDA context). */
  this_kernel: number | null;
  allocator: IAllocator | null;
  processes: IGpuProcess[];
}

/** How CUDA orders devices (CUDA_DEVICE_ORDER). */
export type DeviceOrder = 'FASTEST_FIRST' | 'PCI_BUS_ID';

/** The machine's GPUs as NVML sees them. */
export interface IGpuInfo {
  available: boolean;
  /** Why no GPU is visible (null when available). */
  reason: string | null;
  driver_version: string | null;
  cuda_driver_version: string | null;
  /** CUDA_VISIBLE_DEVICES as the kernel sees it; null when unset. */
  visible_devices: string | null;
  device_order: DeviceOrder;
  devices: IDevice[];
}

/** What torch looks like in the kernel (read without initialising CUDA). */
export interface ITorchState {
  imported: boolean;
  version: string | null;
  cuda_initialized: boolean;
}

/** The kernel process itself. */
export interface IKernelUsage {
  pid: number;
  /** NVML: this PID on all devices. */
  gpu_used: number | null;
  torch: ITorchState;
}

/** Child processes of the kernel (DataLoader workers). */
export interface IChildren {
  count: number;
  rss: number;
}

/** Host (CPU) memory. */
export interface IHostMemory {
  rss: number;
  total: number;
  available: number;
  children: IChildren;
  /** cgroup memory limit; null when unlimited. */
  container_limit: number | null;
  container_usage: number | null;
}

/** One measurement, pushed every `interval` seconds while the comm is open. */
export interface ISample {
  type: 'sample';
  /** Position in the sampler's stream from 1 (a gap: nobody listened); 0 for a sample taken on request. */
  seq: number;
  time: number;
  gpu: IGpuInfo;
  kernel: IKernelUsage;
  host: IHostMemory;
  /** New problems since the last sample (each reported once). */
  errors: string[];
}

/** The answer to a request. */
export interface IReply {
  type: 'reply';
  id: string;
  action: string;
  result: JSONObject;
}

/** Error codes of protocol v1. */
export type ErrorCode = 'bad-request' | 'unknown-action' | 'internal';

/** A failed request (id set) or a problem of the kernel side that belongs to no request (id null). */
export interface IErrorMessage {
  type: 'error';
  id: string | null;
  code: ErrorCode;
  message: string;
}

/** Every message the kernel may send. */
export type KernelMessage = IHello | IHistory | ISample | IReply | IErrorMessage;

/** The message types of protocol v1 (kernel → browser). */
export const KERNEL_MESSAGE_TYPES: ReadonlyArray<KernelMessage['type']> = [
  'hello',
  'history',
  'sample',
  'reply',
  'error'
];

/** A live descendant of the kernel (`children` action). */
export interface IChildProcess {
  pid: number;
  create_time: number;
  name: string | null;
  rss: number | null;
  /** NVML bytes on all devices; 0: a GPU is visible and does not list it; null: no GPU or no figure. */
  gpu_used: number | null;
}

/** What became of a process recorded earlier (`processes` action). */
export interface IProcessState {
  pid: number;
  create_time: number;
  /** The PID runs (a zombie does not count). */
  alive: boolean;
  /** Alive and started at `create_time`: not a PID since given to another process. */
  same_process: boolean;
  /** null unless `same_process`. */
  name: string | null;
  gpu_used: number | null;
}

/** `result` of each request action. */
export interface IRequestResults {
  /** Taken now; `seq` 0, `errors` lists every current problem. */
  snapshot: ISample;
  history: { samples: ISample[] };
  configure: { interval: number; history_seconds: number };
  children: { children: IChildProcess[] };
  processes: { processes: IProcessState[] };
  terminate: { terminated: number[]; refused: Array<{ pid: number; reason: string }> };
  ping: Record<string, never>;
}

/**
 * Why a message was not accepted. A value (not an exception) so callers can show it as a state.
 */
export class ProtocolProblem {
  constructor(
    /** One line saying which field is wrong and how. */
    readonly message: string,
    /** The message's `type` when it had one. */
    readonly messageType: string | null = null,
    /** Set when the kernel's `hello` speaks another protocol version. */
    readonly kernelProtocol: number | null = null
  ) {}

  /** True when the message had a type this version does not know (a newer kernel may add some). */
  get unknownType(): boolean {
    return (
      this.messageType !== null && !(KERNEL_MESSAGE_TYPES as ReadonlyArray<string>).includes(this.messageType)
    );
  }
}

// ---------------------------------------------------------------------------------------------------------
// checks, field by field

const allocatorCheck = object({
  allocated: bytes,
  reserved: bytes,
  peak_allocated: bytes,
  peak_reserved: bytes,
  num_ooms: count,
  num_alloc_retries: count
});

const processCheck = object({
  pid: count,
  name: nullable(str),
  used: nullable(bytes),
  kernel_id: nullable(str),
  this_kernel: bool
});

const percent = intIn(0, 100);

const deviceCheck = object({
  nvml_index: count,
  cuda_index: nullable(count),
  name: nullable(str),
  uuid: nullable(str),
  mig: bool,
  total: nullable(bytes),
  used: nullable(bytes),
  free: nullable(bytes),
  util_gpu: nullable(percent),
  util_mem: nullable(percent),
  compute_capability: nullable(matching(/^[0-9]+\.[0-9]+$/, 'a version like "8.9"')),
  sm_count: nullable(count),
  this_kernel: nullable(bytes),
  allocator: nullable(allocatorCheck),
  processes: arrayOf(processCheck)
});

const sampleBody = object({
  seq: count,
  time: num,
  gpu: object({
    available: bool,
    reason: nullable(str),
    driver_version: nullable(str),
    cuda_driver_version: nullable(str),
    visible_devices: nullable(str),
    device_order: oneOf('FASTEST_FIRST', 'PCI_BUS_ID'),
    devices: arrayOf(deviceCheck)
  }),
  kernel: object({
    pid: count,
    gpu_used: nullable(bytes),
    torch: object({ imported: bool, version: nullable(str), cuda_initialized: bool })
  }),
  host: object({
    rss: bytes,
    total: bytes,
    available: bytes,
    children: object({ count, rss: bytes }),
    container_limit: nullable(bytes),
    container_usage: nullable(bytes)
  }),
  errors: arrayOf(str)
});

/** A sample wherever it appears (alone, in a history, in a snapshot reply): `type` must say "sample". */
const sampleCheck: Check = (value, path) =>
  object({ type: oneOf('sample') })(value, path) ?? sampleBody(value, path);

const helloCheck = object(
  {
    type: oneOf('hello'),
    protocol: int,
    version: str,
    pid: count,
    capabilities: arrayOf(str),
    interval: numIn(0.1, 60),
    history_seconds: intIn(10, 3600),
    python: str,
    ipykernel: nullable(str),
    torch: nullable(str)
  },
  { create_time: nullable(num) }
);

const historyCheck = object({ type: oneOf('history'), samples: arrayOf(sampleCheck) });

const replyCheck = object({
  type: oneOf('reply'),
  id: str,
  action: str,
  result: object({})
});

const errorCheck = object({
  type: oneOf('error'),
  id: nullable(str),
  code: oneOf('bad-request', 'unknown-action', 'internal'),
  message: str
});

const pidCheck = intIn(1, Number.MAX_SAFE_INTEGER);

const childCheck = object({
  pid: pidCheck,
  create_time: num,
  name: nullable(str),
  rss: nullable(bytes),
  gpu_used: nullable(bytes)
});

const processStateCheck = object({
  pid: pidCheck,
  create_time: num,
  alive: bool,
  same_process: bool,
  name: nullable(str),
  gpu_used: nullable(bytes)
});

const resultChecks: { readonly [A in RequestAction]: Check } = {
  snapshot: sampleCheck,
  history: object({ samples: arrayOf(sampleCheck) }),
  configure: object({ interval: numIn(0.1, 60), history_seconds: intIn(10, 3600) }),
  children: object({ children: arrayOf(childCheck) }),
  processes: object({ processes: arrayOf(processStateCheck) }),
  terminate: object({
    terminated: arrayOf(pidCheck),
    refused: arrayOf(object({ pid: int, reason: str }))
  }),
  ping: object({})
};

// ---------------------------------------------------------------------------------------------------------
// guards

/** Explains why `value` is not a valid sample, or null when it is. */
export function sampleProblem(value: unknown): string | null {
  return sampleCheck(value, 'sample');
}

/** A complete, well-typed `hello` (of any protocol number: compare it with PROTOCOL_VERSION yourself). */
export function isHello(value: unknown): value is IHello {
  return helloCheck(value, 'hello') === null;
}

/** A complete, well-typed `sample`. */
export function isSample(value: unknown): value is ISample {
  return sampleCheck(value, 'sample') === null;
}

/** A complete, well-typed `history`. */
export function isHistory(value: unknown): value is IHistory {
  return historyCheck(value, 'history') === null;
}

/** A complete, well-typed `reply` (its `result` is checked per action by `parseResult`). */
export function isReply(value: unknown): value is IReply {
  return replyCheck(value, 'reply') === null;
}

/** A complete, well-typed `error`. */
export function isError(value: unknown): value is IErrorMessage {
  return errorCheck(value, 'error') === null;
}

/** The message that tells the user what to do when the two sides speak different protocol versions. */
export function protocolMismatchMessage(kernelProtocol: number): string {
  const fix =
    kernelProtocol < PROTOCOL_VERSION
      ? "run `pip install -U jupyterlab-gpumem` in the kernel's environment"
      : "run `pip install -U jupyterlab-gpumem` in JupyterLab's environment and reload the page";
  return `kernel speaks protocol v${kernelProtocol}, this extension speaks v${PROTOCOL_VERSION} — ${fix}`;
}

/**
 * Validate one comm message from the kernel.
 *
 * Returns the typed message, or a `ProtocolProblem` naming the first field that is wrong. A `hello` whose
 * `protocol` is another integer is a problem with `kernelProtocol` set, checked before any other field (a
 * different protocol may have different fields).
 */
export function parseKernelMessage(data: unknown): KernelMessage | ProtocolProblem {
  if (!isRecord(data)) {
    return new ProtocolProblem(`message: expected a JSON object, got ${describeValue(data)}`);
  }
  const type = data.type;
  if (typeof type !== 'string') {
    return new ProtocolProblem(`message.type: expected a string, got ${describeValue(type)}`);
  }
  let problem: string | null;
  switch (type) {
    case 'hello': {
      const protocol = data.protocol;
      if (typeof protocol === 'number' && Number.isInteger(protocol) && protocol !== PROTOCOL_VERSION) {
        return new ProtocolProblem(protocolMismatchMessage(protocol), type, protocol);
      }
      problem = helloCheck(data, 'hello');
      break;
    }
    case 'history':
      problem = historyCheck(data, 'history');
      break;
    case 'sample':
      problem = sampleCheck(data, 'sample');
      break;
    case 'reply':
      problem = replyCheck(data, 'reply');
      break;
    case 'error':
      problem = errorCheck(data, 'error');
      break;
    default:
      return new ProtocolProblem(`message.type: unknown message type ${JSON.stringify(type)}`, type);
  }
  if (problem !== null) {
    return new ProtocolProblem(problem, type);
  }
  // Every field has been checked above: the data is exactly a KernelMessage.
  return data as unknown as KernelMessage;
}

/** Validate the `result` of a reply to `action`. */
export function parseResult<A extends RequestAction>(
  action: A,
  result: unknown
): IRequestResults[A] | ProtocolProblem {
  const problem = resultChecks[action](result, `reply(${action}).result`);
  if (problem !== null) {
    return new ProtocolProblem(problem, 'reply');
  }
  return result as IRequestResults[A];
}

/** The `comm_open` data for this extension. */
export function makeOpen(interval: number, historySeconds: number, client: string): IOpenMessage {
  return {
    type: 'open',
    protocol: PROTOCOL_VERSION,
    interval,
    history_seconds: Math.round(historySeconds),
    client
  };
}

// ---------------------------------------------------------------------------------------------------------
// Inline outputs and main-thread answers: the clear report and the OOM checklist
// (gpumem_kernel/wire/schemas/clear.schema.json and oom.schema.json). Unlike the comm messages above, these
// payloads carry a `version` and are read from cell outputs that may be years old, so a payload that does
// not fit is shown as one line instead of being half-rendered.

/** The MIME type of the OOM checklist output (the kernel's handler adds it after the traceback). */
export const OOM_MIME = 'application/vnd.gpumem.oom.v1+json';

/** The MIME type of the clear report output (`%gpumem clear`). */
export const CLEAR_MIME = 'application/vnd.gpumem.clear.v1+json';

/** Bytes per device name ("cuda:0", "cpu", "mps"). */
export type ByDevice = Record<string, number>;

/** A name that keeps tensors alive, and the bytes only it keeps alive. */
export interface IClearHolder {
  name: string;
  kind: 'tensor' | 'module' | 'optimizer' | 'list' | 'tuple' | 'dict' | 'set' | 'traceback' | 'other';
  type_name: string;
  bytes: number;
  by_device: ByDevice;
  tensors: number;
  shape: number[] | null;
  dtype: string | null;
}

/** One CUDA device before and after a clear: the allocator's figures and NVML's figure for this process. */
export interface IClearDevice {
  /** "cuda:N". */
  device: string;
  name: string | null;
  allocated_before: number | null;
  allocated_after: number | null;
  reserved_before: number | null;
  reserved_after: number | null;
  this_kernel_before: number | null;
  this_kernel_after: number | null;
}

/** `application/vnd.gpumem.clear.v1+json`: what a clear dropped, reclaimed, and what still holds memory. */
export interface IClearPayload {
  version: 1;
  dry_run: boolean;
  torch_imported: boolean;
  cuda_initialized: boolean;
  /** Where the last error's traceback was referenced from (`sys.last_traceback`, …). */
  traceback_sources: string[];
  traceback_frames: number;
  traceback_freed: IClearHolder | null;
  output_cache: IClearHolder[];
  output_cache_entries: number;
  /** User variables deleted on request (`--vars`, `--all-cuda-vars`). */
  deleted: IClearHolder[];
  gc_collected: number | null;
  emptied_cache: boolean;
  devices: IClearDevice[];
  host_rss_before: number | null;
  host_rss_after: number | null;
  /** What still holds memory, largest CUDA share first. */
  holders: IClearHolder[];
  holders_more: number;
  notes: string[];
  /** "cuda:N" → bytes returned (NVML's figure for this process when known, else the allocator's). */
  reclaimed: Record<string, number | null>;
}

/** The numbers of PyTorch's out-of-memory message. */
export interface IOomInfo {
  format: '1.x' | '2.x' | 'cuda-error' | 'unknown';
  backend: 'CUDA' | 'HIP' | 'XPU';
  exception: string | null;
  message: string;
  tried_to_allocate: number | null;
  device: number | null;
  total_capacity: number | null;
  free: number | null;
  allowed: number | null;
  allocated_by_pytorch: number | null;
  private_pools: number | null;
  reserved_unallocated: number | null;
  reserved_total: number | null;
  this_process_total: number | null;
  other_processes: Array<{ pid: number; used: number }>;
  hint: 'expandable_segments' | 'max_split_size_mb' | null;
}

export interface IOomFragmentation {
  reserved_unallocated: number;
  threshold: number;
  decisive: boolean;
  expandable_segments_set: boolean;
  suggest: boolean;
}

/** Another process on the device that failed (from the message, a fresh probe, or both). */
export interface IOomProcess {
  pid: number;
  used: number | null;
  name: string | null;
  kernel_id: string | null;
  child_of_kernel: boolean;
  source: 'message' | 'probe' | 'both';
}

export interface IOomTraceback {
  frames: number;
  tensors: number;
  bytes: number;
  by_device: ByDevice;
}

export interface IOomHost {
  rss: number | null;
  total: number | null;
  available: number | null;
  workers: number;
  workers_rss: number;
  container_limit: number | null;
  container_usage: number | null;
  low: boolean;
}

export interface IOomLoader {
  name: string;
  batch_size: number | null;
  num_workers: number;
}

export interface IOomInputSize {
  name: string;
  value: number;
  kind: 'image' | 'sequence';
}

export interface IOomModel {
  name: string;
  type_name: string;
  parameters: number;
  bytes: number;
  blocks: string | null;
  blocks_kind: 'ModuleList' | 'Sequential' | null;
  hf_checkpointing: boolean;
  checkpointing_on: boolean;
}

/** The variable names the inserted cells use. */
export interface IOomNames {
  model: string;
  optimizer: string;
  loader: string;
  criterion: string;
  device: string;
}

/** What the message, a fresh probe and the user namespace say. */
export interface IOomDiagnosis {
  device: number | null;
  too_large: boolean;
  fragmentation: IOomFragmentation | null;
  other_processes: IOomProcess[];
  pid_unmatched: boolean;
  traceback: IOomTraceback | null;
  host: IOomHost | null;
  loaders: IOomLoader[];
  num_workers: number | null;
  amp: 'likely' | 'unknown';
  bf16_supported: boolean | null;
  batch_size: number | null;
  batch_size_source: string | null;
  input_size: IOomInputSize | null;
  model: IOomModel | null;
  names: IOomNames;
  alloc_conf_var: 'PYTORCH_CUDA_ALLOC_CONF' | 'PYTORCH_HIP_ALLOC_CONF';
  alloc_conf: string | null;
  torch_version: string | null;
  notes: string[];
}

/** What a checklist step's button does (null: advice only). */
export type OomStepAction =
  'clear' | 'restart' | 'shutdown-kernel' | 'insert-cell' | 'insert-env-cell-and-restart';

/** One checklist step: a button (action), a cell to insert (code) or advice (action null). */
export interface IOomStep {
  /** `^[a-z0-9-]+$`; the key under which the tick is remembered. */
  id: string;
  title: string;
  detail: string;
  action: OomStepAction | null;
  /** Set for `shutdown-kernel`. */
  kernel_id: string | null;
  /** Set for `insert-cell` and `insert-env-cell-and-restart`. */
  code: string | null;
}

/** `application/vnd.gpumem.oom.v1+json`: the parsed message, the diagnosis and the checklist. */
export interface IOomPayload {
  version: 1;
  /** One to three lines: what failed, with PyTorch's figures. */
  summary: string[];
  info: IOomInfo;
  diagnosis: IOomDiagnosis;
  /** Cheapest and least drastic first. */
  steps: IOomStep[];
}

const byDeviceCheck = recordOf(bytes);

const holderCheck = object({
  name: str,
  kind: oneOf('tensor', 'module', 'optimizer', 'list', 'tuple', 'dict', 'set', 'traceback', 'other'),
  type_name: str,
  bytes,
  by_device: byDeviceCheck,
  tensors: count,
  shape: nullable(arrayOf(count)),
  dtype: nullable(str)
});

const cudaName = /^cuda:[0-9]+$/;

const clearDeviceCheck = object({
  device: matching(cudaName, 'a device name like "cuda:0"'),
  name: nullable(str),
  allocated_before: nullable(bytes),
  allocated_after: nullable(bytes),
  reserved_before: nullable(bytes),
  reserved_after: nullable(bytes),
  this_kernel_before: nullable(bytes),
  this_kernel_after: nullable(bytes)
});

const clearCheck = object({
  version: constant(1),
  dry_run: bool,
  torch_imported: bool,
  cuda_initialized: bool,
  traceback_sources: arrayOf(str),
  traceback_frames: count,
  traceback_freed: nullable(holderCheck),
  output_cache: arrayOf(holderCheck),
  output_cache_entries: count,
  deleted: arrayOf(holderCheck),
  gc_collected: nullable(count),
  emptied_cache: bool,
  devices: arrayOf(clearDeviceCheck),
  host_rss_before: nullable(bytes),
  host_rss_after: nullable(bytes),
  holders: arrayOf(holderCheck),
  holders_more: count,
  notes: arrayOf(str),
  reclaimed: recordOf(nullable(int), cudaName, 'a device name like "cuda:0"')
});

const oomInfoCheck = object({
  format: oneOf('1.x', '2.x', 'cuda-error', 'unknown'),
  backend: oneOf('CUDA', 'HIP', 'XPU'),
  exception: nullable(str),
  message: strLength(0, 2000),
  tried_to_allocate: nullable(bytes),
  device: nullable(count),
  total_capacity: nullable(bytes),
  free: nullable(bytes),
  allowed: nullable(bytes),
  allocated_by_pytorch: nullable(bytes),
  private_pools: nullable(bytes),
  reserved_unallocated: nullable(bytes),
  reserved_total: nullable(bytes),
  this_process_total: nullable(bytes),
  other_processes: arrayOf(object({ pid: count, used: bytes })),
  hint: nullable(oneOf('expandable_segments', 'max_split_size_mb'))
});

const oomDiagnosisCheck = object({
  device: nullable(count),
  too_large: bool,
  fragmentation: nullable(
    object({
      reserved_unallocated: bytes,
      threshold: bytes,
      decisive: bool,
      expandable_segments_set: bool,
      suggest: bool
    })
  ),
  other_processes: arrayOf(
    object({
      pid: count,
      used: nullable(bytes),
      name: nullable(str),
      kernel_id: nullable(str),
      child_of_kernel: bool,
      source: oneOf('message', 'probe', 'both')
    })
  ),
  pid_unmatched: bool,
  traceback: nullable(object({ frames: count, tensors: count, bytes, by_device: byDeviceCheck })),
  host: nullable(
    object({
      rss: nullable(bytes),
      total: nullable(bytes),
      available: nullable(bytes),
      workers: count,
      workers_rss: bytes,
      container_limit: nullable(bytes),
      container_usage: nullable(bytes),
      low: bool
    })
  ),
  loaders: arrayOf(object({ name: str, batch_size: nullable(count), num_workers: count })),
  num_workers: nullable(count),
  amp: oneOf('likely', 'unknown'),
  bf16_supported: nullable(bool),
  batch_size: nullable(intIn(1, Number.MAX_SAFE_INTEGER)),
  batch_size_source: nullable(str),
  input_size: nullable(
    object({ name: str, value: intIn(1, Number.MAX_SAFE_INTEGER), kind: oneOf('image', 'sequence') })
  ),
  model: nullable(
    object({
      name: str,
      type_name: str,
      parameters: count,
      bytes,
      blocks: nullable(str),
      blocks_kind: nullable(oneOf('ModuleList', 'Sequential')),
      hf_checkpointing: bool,
      checkpointing_on: bool
    })
  ),
  names: object({ model: str, optimizer: str, loader: str, criterion: str, device: str }),
  alloc_conf_var: oneOf('PYTORCH_CUDA_ALLOC_CONF', 'PYTORCH_HIP_ALLOC_CONF'),
  alloc_conf: nullable(str),
  torch_version: nullable(str),
  notes: arrayOf(str)
});

/** A step's button needs what it acts on: a kernel id to shut down, a cell's code to insert. */
const stepNeeds: Check = (value, path) => {
  const step = value as Record<string, unknown>;
  if (step.action === 'shutdown-kernel') {
    return strLength(1)(step.kernel_id, `${path}.kernel_id`);
  }
  if (step.action === 'insert-cell' || step.action === 'insert-env-cell-and-restart') {
    return strLength(1)(step.code, `${path}.code`);
  }
  return null;
};

const stepCheck = allOf(
  object({
    id: matching(/^[a-z0-9-]+$/, 'a step id of a-z, 0-9 and -'),
    title: strLength(1),
    detail: str,
    action: nullable(
      oneOf('clear', 'restart', 'shutdown-kernel', 'insert-cell', 'insert-env-cell-and-restart')
    ),
    kernel_id: nullable(str),
    code: nullable(str)
  }),
  stepNeeds
);

const oomCheck = object({
  version: constant(1),
  summary: arrayOfAtLeast(1, str),
  info: oomInfoCheck,
  diagnosis: oomDiagnosisCheck,
  steps: arrayOfAtLeast(1, stepCheck)
});

/** Explains why `value` is not a clear report (version 1), or null when it is. */
export function clearPayloadProblem(value: unknown): string | null {
  return clearCheck(value, 'clear');
}

/** A complete, well-typed clear report (`application/vnd.gpumem.clear.v1+json`). */
export function isClearPayload(value: unknown): value is IClearPayload {
  return clearPayloadProblem(value) === null;
}

/** Explains why `value` is not an OOM checklist (version 1), or null when it is. */
export function oomPayloadProblem(value: unknown): string | null {
  return oomCheck(value, 'oom');
}

/** A complete, well-typed OOM checklist (`application/vnd.gpumem.oom.v1+json`). */
export function isOomPayload(value: unknown): value is IOomPayload {
  return oomPayloadProblem(value) === null;
}
