/**
 * The `gpumem` comm protocol, version 1, and the clear / OOM payloads: what the schemas cannot say.
 *
 * The types and checks of every message come from the JSON Schemas in gpumem_kernel/wire/schemas/ (the one
 * source of the wire format), generated into ./generated/ by `jlpm gen:wire`; this file exports them under the
 * names the rest of src/ uses and adds the constants (protocol version, comm target, MIME types), the maps from
 * request actions to their args and results, and the parsing of a kernel message into a typed message or one
 * line saying why not. Sizes are integer bytes, times seconds since the epoch, percentages 0–100, and a value
 * that could not be measured is `null` (never omitted). Fields a schema does not name are ignored (README.md
 * beside the schemas, "Extra fields").
 */
import type {
  IChildrenResult,
  IClearByDevice,
  IClearPayload,
  IConfigureArgs,
  IConfigureResult,
  IErrorMessage,
  IGpuInfo,
  IGrowth,
  IHello,
  IHistory,
  IHistoryResult,
  IHoldersMessage,
  IKernelExitAnswer,
  IOomPayload,
  IOomStep,
  IOpenMessage,
  IProcessArgs,
  IProcessesResult,
  IReply,
  ISample,
  ITerminateResult,
  ITimelineExportArgs,
  ITimelineExportResult
} from './generated/types';
import * as checks from './generated/validators';
import { type Check, describeValue, isRecord } from './keywords';

export type {
  IAllocator,
  IChildProcess,
  IChildren,
  IChildrenResult,
  IClearDevice,
  IClearHolder,
  IClearPayload,
  IConfigureArgs,
  IConfigureResult,
  IDevice,
  IErrorMessage,
  IGpuInfo,
  IGpuProcess,
  IGrowingHolder,
  IGrowth,
  IHello,
  IHistory,
  IHistoryResult,
  IHolderLine,
  IHoldersDevice,
  IHoldersMessage,
  IHostMemory,
  IKernelExit,
  IKernelExitAnswer,
  IKernelUsage,
  IOomDiagnosis,
  IOomFragmentation,
  IOomHost,
  IOomInfo,
  IOomInputSize,
  IOomLoader,
  IOomModel,
  IOomNames,
  IOomPayload,
  IOomProcess,
  IOomProcessUse,
  IOomStep,
  IOomTraceback,
  IOpenMessage,
  IProcessArgs,
  IProcessesResult,
  IProcessRef,
  IProcessState,
  IRefusal,
  IReply,
  IRequestMessage,
  IRerunGrowth,
  IRunningGrowth,
  ISample,
  ITerminateResult,
  ITimelineExportArgs,
  ITimelineExportResult,
  ITorchState,
  IWatchEvent
} from './generated/types';

/** The protocol this extension speaks. A `hello` with another number is refused. */
export const PROTOCOL_VERSION = 1;

/** The comm target name the kernel registers. */
export const COMM_TARGET = 'gpumem';

/** The MIME type of the OOM checklist output (the kernel's handler adds it after the traceback). */
export const OOM_MIME = 'application/vnd.gpumem.oom.v1+json';

/** The MIME type of the clear report output (`%gpumem clear`). */
export const CLEAR_MIME = 'application/vnd.gpumem.clear.v1+json';

/** The request actions of protocol v1. */
export type RequestAction = IReply['action'];

/** How CUDA orders devices (CUDA_DEVICE_ORDER). */
export type DeviceOrder = IGpuInfo['device_order'];

/** Error codes of protocol v1. */
export type ErrorCode = IErrorMessage['code'];

/** Bytes per device name ("cuda:0", "cpu", "mps"). */
export type ByDevice = IClearByDevice;

/** What a checklist step's button does (null: advice only). */
export type OomStepAction = NonNullable<IOomStep['action']>;

/** An action that takes no arguments: `args` is `{}`. */
type NoArgs = Record<string, never>;

/** `args` of each request action (request.schema.json, `if` action … `then` args). */
export interface IRequestArgs {
  snapshot: NoArgs;
  history: NoArgs;
  configure: IConfigureArgs;
  children: NoArgs;
  /** At most 1024 processes. */
  processes: IProcessArgs;
  terminate: IProcessArgs;
  /** "Still here": a comm the kernel has not heard from for a while is dropped. */
  ping: NoArgs;
  /** A timeline payload's full history as a file; only for kernels whose hello lists "timeline". */
  timeline_export: ITimelineExportArgs;
}

/** `result` of each request action (reply.schema.json, `if` action … `then` result). */
export interface IRequestResults {
  /** Taken now; `seq` 0, `errors` lists every current problem. */
  snapshot: ISample;
  history: IHistoryResult;
  configure: IConfigureResult;
  children: IChildrenResult;
  processes: IProcessesResult;
  terminate: ITerminateResult;
  ping: NoArgs;
  /** The file, base64 in `data`; an unknown id is answered with an `error` ("re-run the cell"). */
  timeline_export: ITimelineExportResult;
}

/** Every message the kernel may send. */
export type KernelMessage = IHello | IHistory | ISample | IReply | IErrorMessage | IHoldersMessage | IGrowth;

/** The message types of protocol v1 (kernel → browser). */
export const KERNEL_MESSAGE_TYPES: ReadonlyArray<KernelMessage['type']> = [
  'hello',
  'history',
  'sample',
  'reply',
  'error',
  'holders',
  'growth'
];

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

const MESSAGE_CHECKS: { readonly [T in KernelMessage['type']]: Check } = {
  hello: checks.hello,
  history: checks.history,
  sample: checks.sample,
  reply: checks.reply,
  error: checks.errorMessage,
  holders: checks.holdersMessage,
  growth: checks.growth
};

const RESULT_CHECKS: { readonly [A in RequestAction]: Check } = {
  snapshot: checks.sample,
  history: checks.historyResult,
  configure: checks.configureResult,
  children: checks.childrenResult,
  processes: checks.processesResult,
  terminate: checks.terminateResult,
  ping: checks.pingResult,
  timeline_export: checks.timelineExportResult
};

/** Explains why `value` is not a valid sample, or null when it is. */
export function sampleProblem(value: unknown): string | null {
  return checks.sample(value, 'sample');
}

/** A complete, well-typed `hello` (of any protocol number: compare it with PROTOCOL_VERSION yourself). */
export function isHello(value: unknown): value is IHello {
  return checks.hello(value, 'hello') === null;
}

/** A complete, well-typed `sample`. */
export function isSample(value: unknown): value is ISample {
  return checks.sample(value, 'sample') === null;
}

/** A complete, well-typed `history`. */
export function isHistory(value: unknown): value is IHistory {
  return checks.history(value, 'history') === null;
}

/** A complete, well-typed `reply` (its `result` fits its action). */
export function isReply(value: unknown): value is IReply {
  return checks.reply(value, 'reply') === null;
}

/** A complete, well-typed `error`. */
export function isError(value: unknown): value is IErrorMessage {
  return checks.errorMessage(value, 'error') === null;
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
  if (!Object.prototype.hasOwnProperty.call(MESSAGE_CHECKS, type)) {
    return new ProtocolProblem(`message.type: unknown message type ${JSON.stringify(type)}`, type);
  }
  const protocol = data.protocol;
  if (type === 'hello' && Number.isInteger(protocol) && protocol !== PROTOCOL_VERSION) {
    return new ProtocolProblem(protocolMismatchMessage(protocol as number), type, protocol as number);
  }
  const problem = MESSAGE_CHECKS[type as KernelMessage['type']](data, type);
  // Every field the schema names has been checked: the data is a KernelMessage (plus any fields it ignores).
  return problem === null ? (data as unknown as KernelMessage) : new ProtocolProblem(problem, type);
}

/** Validate the `result` of a reply to `action`. */
export function parseResult<A extends RequestAction>(
  action: A,
  result: unknown
): IRequestResults[A] | ProtocolProblem {
  const problem = RESULT_CHECKS[action](result, `reply(${action}).result`);
  return problem === null ? (result as IRequestResults[A]) : new ProtocolProblem(problem, 'reply');
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
// Inline outputs and main-thread answers: the clear report and the OOM checklist. Unlike the comm messages
// above, these payloads carry a `version` and are read from cell outputs that may be years old, so a payload
// that does not fit is shown as one line instead of being half-rendered.

/** Explains why `value` is not a clear report (version 1), or null when it is. */
export function clearPayloadProblem(value: unknown): string | null {
  return checks.clearPayload(value, 'clear');
}

/** A complete, well-typed clear report (`application/vnd.gpumem.clear.v1+json`). */
export function isClearPayload(value: unknown): value is IClearPayload {
  return clearPayloadProblem(value) === null;
}

/** Explains why `value` is not an OOM checklist (version 1), or null when it is. */
export function oomPayloadProblem(value: unknown): string | null {
  return checks.oomPayload(value, 'oom');
}

/** A complete, well-typed OOM checklist (`application/vnd.gpumem.oom.v1+json`). */
export function isOomPayload(value: unknown): value is IOomPayload {
  return oomPayloadProblem(value) === null;
}

/** Explains why `value` is not a `watch_event` (an output-area watch's message), or null when it is. */
export function watchEventProblem(value: unknown): string | null {
  return checks.watchEvent(value, 'watch_event');
}

/**
 * The server's answer to `POST /gpumem/kernels/<id>/exit` (kernel_exit.schema.json), its checklist checked as
 * an OOM checklist; null when it fits neither.
 */
export function parseKernelExit(
  value: unknown
): { exit: IKernelExitAnswer['exit']; checklist: IOomPayload | null } | null {
  if (checks.kernelExitAnswer(value, 'kernel_exit') !== null) {
    return null;
  }
  const answer = value as IKernelExitAnswer;
  if (answer.checklist !== null && !isOomPayload(answer.checklist)) {
    return null;
  }
  return { exit: answer.exit, checklist: answer.checklist as IOomPayload | null };
}
