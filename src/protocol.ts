/**
 * The `gpumem` comm protocol, version 1, as TypeScript types and runtime guards.
 *
 * This file mirrors `gpumem_kernel/schemas/README.md` (and the JSON Schemas beside it) field by field; the
 * Python side mirrors the same document in `gpumem_kernel/protocol.py`. Sizes are integer bytes, times are
 * seconds since the epoch, percentages are 0–100, and a value that could not be measured is `null` (never
 * omitted). Change the README first, then both mirrors.
 */
import type { JSONObject } from '@lumino/coreutils';

import {
  arrayOf,
  bool,
  bytes,
  type Check,
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
  str
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
  | 'snapshot'
  | 'history'
  | 'configure'
  | 'children'
  | 'processes'
  | 'terminate';

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
      this.messageType !== null &&
      !(KERNEL_MESSAGE_TYPES as ReadonlyArray<string>).includes(this.messageType)
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
  })
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
