/**
 * The public interface of jupyterlab-gpumem, for this extension's views and for later extensions (the OOM
 * checklist, the analysis renderer) that want the current kernel's GPU memory without opening a second comm.
 *
 * Interfaces only: this module imports nothing but types, and only from the bottom modules that import nothing
 * above them (the wire format, the settings, types.ts). The classes that implement these interfaces (the
 * model, the bridge, the session actions, the tick store, the inline host) import this module, never the
 * reverse, so no import circle can pass through here. ESLint refuses any other import of our own modules in
 * this file; `jlpm lint:cycles` checks for circles.
 */
import type { ISessionContext } from '@jupyterlab/apputils';
import type { Kernel } from '@jupyterlab/services';
import { Token } from '@lumino/coreutils';
import type { ISignal } from '@lumino/signaling';

import type { IGpuMemSettings } from './settings';
import type {
  IBridgeState,
  IKernelSession,
  IOomError,
  IRestartReport,
  IStepFeedback,
  RestartPhase
} from './types';
import type {
  IChildProcess,
  IClearPayload,
  IGpuProcess,
  IHello,
  IHoldersMessage,
  IOomPayload,
  IOomStep,
  IRequestArgs,
  IRequestResults,
  IRerunGrowth,
  IRunningGrowth,
  ISample,
  RequestAction
} from './wire/protocol';

/** A problem the kernel side reported outside any request (`errors` of a sample, `error` with id null). */
export interface IKernelProblem {
  /** Seconds since the epoch (the sample's time, or when it arrived). */
  readonly time: number;
  readonly text: string;
}

/** Memory that keeps growing in the current kernel (its `growth` messages). */
export interface IGrowthState {
  /** The running cell's trend while the kernel claims one ("allocated grows 30 MiB/min in this cell"). */
  readonly running: IRunningGrowth | null;
  /** The newest re-run notice of this kernel process ("Cell [12] leaves +512 MiB after each run"). */
  readonly rerun: IRerunGrowth | null;
  /** When the kernel sent `rerun` (seconds since the epoch): tells one notice from the next. */
  readonly rerunTime: number | null;
}

/** The part of a session's kernel bridge that the actions use (the bridge itself fits). */
export interface IBridgeView {
  readonly hello: IHello | null;
  readonly latest: ISample | null;
  readonly dataChanged: ISignal<unknown, void>;
  request<A extends RequestAction>(
    action: A,
    args?: IRequestArgs[A],
    timeoutMs?: number
  ): Promise<IRequestResults[A]>;
}

/** The live GPU memory of the current notebook's (or console's) kernel. */
export interface IGpuMemModel {
  /** Where the connection to the current kernel stands (each state has a user-facing message). */
  readonly state: IBridgeState;
  /** The kernel side's `hello`, once connected. */
  readonly hello: IHello | null;
  /** The newest sample of the current kernel. */
  readonly latest: ISample | null;
  /** Samples of the last `settings.historyMinutes`, oldest first. */
  readonly history: ReadonlyArray<ISample>;
  /** Problems the kernel side reported recently (NVML calls that failed, …). */
  readonly problems: ReadonlyArray<IKernelProblem>;
  /** Which variables hold GPU memory after the last cell ("Held by"); absent from models that predate it. */
  readonly holders?: IHoldersMessage | null;
  /** Memory that keeps growing (absent from models that predate it). */
  readonly growth?: IGrowthState;
  readonly settings: IGpuMemSettings;
  /** The current notebook's or console's session, or null when none is open. */
  readonly sessionContext: ISessionContext | null;
  /** "Python 3 (ipykernel) · train.ipynb", or null without a kernel. */
  readonly kernelLabel: string | null;
  /** The current kernel's execution status, or null without a kernel. */
  readonly kernelStatus: Kernel.Status | null;
  /** Requests waiting for a reply (they queue behind a running cell). */
  readonly pendingRequests: number;
  /** Emitted on any change (state, data, settings, the current kernel). */
  readonly changed: ISignal<IGpuMemModel, void>;
  /** Emitted when `state` changes. */
  readonly stateChanged: ISignal<IGpuMemModel, IBridgeState>;
  /** Kernel id → its session on this server (to name other kernels' processes by their notebook). */
  readonly sessions: ReadonlyMap<string, IKernelSession>;
  /** "this kernel", "notebook: <path>", "console: <path>", "kernel <id8>" or "external". */
  labelProcess(process: IGpuProcess): string;
  /** The bridge of any open session (created when needed), or null for a disposed one. */
  bridgeFor(sessionContext: ISessionContext): IBridgeView | null;
  /** Ask the current kernel's sampler something (see the wire format's request actions). */
  request<A extends RequestAction>(
    action: A,
    args?: IRequestArgs[A],
    timeoutMs?: number
  ): Promise<IRequestResults[A]>;
  /** Reconnect to the current kernel from the start. */
  retry(): void;
  /** Load the kernel shim now even though autoload is off. */
  loadNow(): void;
}

/** The token that provides the model (from the `jupyterlab-gpumem:plugin` plugin). */
export const IGpuMemModel = new Token<IGpuMemModel>(
  'jupyterlab-gpumem:IGpuMemModel',
  'The live GPU memory of the current notebook kernel (state, samples, history, requests).'
);

/**
 * The OOM checklist's ticks, remembered per OOM occurrence (one error in one kernel run), under the key
 * `occurrenceKey(payload)` of actions/ticks.ts.
 */
export interface ITickStore {
  /** Emitted with the occurrence key whose ticks changed (or finished loading). */
  readonly changed: ISignal<ITickStore, string>;
  /** The ticked step ids of an occurrence (empty until loaded: `changed` fires when they arrive). */
  ticks(key: string): ReadonlySet<string>;
  /** Tick or untick one step. */
  set(key: string, stepId: string, ticked: boolean): void;
  /** Untick every step of an occurrence. */
  reset(key: string): void;
}

/**
 * Which kernel run of a session a report or checklist belongs to: SessionActions counts the runs, one more
 * whenever the kernel restarts, dies or is replaced. A report of an earlier run is history, not current.
 */
export interface IKernelRunTag {
  readonly kernelRun: number;
}

/** Who started a clear or a restart: a checklist step (`<occurrence key>#<step id>`), or null (the panel's bar). */
export type ActionOrigin = string | null;

/** The last clear. */
export interface IClearRun extends IKernelRunTag {
  readonly phase: 'running' | 'done' | 'failed';
  readonly origin: ActionOrigin;
  readonly report: IClearPayload | null;
  readonly error: string | null;
}

/** The last restart-and-free (tagged with the kernel run it started, once done). */
export interface IRestartRun extends IKernelRunTag {
  readonly phase: RestartPhase | 'failed';
  readonly origin: ActionOrigin;
  readonly clearOutputs: boolean;
  readonly report: IRestartReport | null;
  readonly error: string | null;
  /** What to do next (after the environment cell was inserted: run it first). */
  readonly note: string | null;
}

/** The checklist of the last OOM. */
export interface IOomRun extends IKernelRunTag {
  /** waiting: for the failing cell to end; loading: asking the kernel; ready / failed. */
  readonly phase: 'waiting' | 'loading' | 'ready' | 'failed';
  readonly error: IOomError;
  readonly payload: IOomPayload | null;
  /** Why there is no checklist, when phase is 'failed'. */
  readonly problem: string | null;
  /** A later run of the failing cell that ended without error (absent or null: none yet). */
  readonly resolved?: IOomResolution | null;
}

/** A later run of the cell that ran out of memory, which ended without error. */
export interface IOomResolution {
  /** Its execution count ("In [N]"), null when the kernel sent none. */
  readonly executionCount: number | null;
  /** When it ended (ms since the epoch). */
  readonly time: number;
}

/** A clear (any: the panel's, a checklist step's, `%gpumem clear`) that ticked the OOM checklist's clear step. */
export interface IClearTick {
  /** The occurrence (`occurrenceKey`) and the step it ticked. */
  readonly key: string;
  readonly stepId: string;
  /** What the clear reported (what it freed). */
  readonly report: IClearPayload;
  /** When it came back (ms since the epoch). */
  readonly time: number;
}

/** The panel's cards of one session: the OOM checklist, the clear report and the restart report. */
export type ActionCard = 'oom' | 'clear' | 'restart';

/** What the user can do to one notebook's (or console's) kernel, and what came of it. */
export interface ISessionActions {
  readonly sessionContext: ISessionContext;
  /** The notebook's widget id (commands and the notification name it), or null for a console. */
  readonly widgetId: string | null;
  /** Emitted on any change of the runs below or of the ticks. */
  readonly changed: ISignal<ISessionActions, void>;
  /** The notebook's path. */
  readonly path: string;
  /** The current kernel run (see IKernelRunTag): runs tagged with a smaller number are history. */
  readonly kernelRun: number;
  /** The ticks key of the OOM shown (`occurrenceKey`), or null while no checklist is ready. */
  readonly oomKey: string | null;
  readonly clearRun: IClearRun | null;
  readonly restartRun: IRestartRun | null;
  readonly oomRun: IOomRun | null;
  /** The last clear that ticked a step of the checklist shown (absent or null: none). */
  readonly clearTick?: IClearTick | null;
  /** The cards there are, newest first (absent: the panel's fixed order). */
  readonly cards?: ReadonlyArray<ActionCard>;
  /** True while a clear or a restart is under way (their buttons are disabled). */
  readonly busy: boolean;
  readonly clearing: boolean;
  readonly restarting: boolean;
  /** The kernel is executing (a request of ours waits behind the running cell). */
  readonly kernelBusy: boolean;
  /** The step ids ticked in the checklist shown (empty without one). */
  readonly ticks: ReadonlySet<string>;
  /** The kernel's children as last reported (`children` action), for the kernel PID they belong to. */
  readonly children: ReadonlyArray<IChildProcess>;
  setTick(stepId: string, ticked: boolean): void;
  resetTicks(): void;
  /** The safe clear; resolves true when a report came back. */
  clear(origin?: ActionOrigin): Promise<boolean>;
  /** Restart and free; resolves with the report, or null when cancelled, failed or already running. */
  restartAndFree(
    clearOutputs?: boolean,
    note?: string | null,
    origin?: ActionOrigin
  ): Promise<IRestartReport | null>;
  /** End an old child that outlived the restart. */
  endLeftover(pid: number): Promise<void>;
  /**
   * Run a checklist step's action; ticks the step in occurrence `key` (default: the checklist shown) when
   * it did what it says.
   */
  runStep(step: IOomStep, key?: string | null): Promise<void>;
  /** Show the checklist of the kernel's last OOM. */
  loadLastOom(): Promise<void>;
  /** Hide the checklist (its ticks stay remembered). */
  dismissOom(): void;
  /** Hide the clear report or the restart report. */
  dismissReport(which: 'clear' | 'restart'): void;
}

/**
 * Clear, restart-and-free, the OOM checklist and "shut down kernel", per open notebook or console
 * (from the `jupyterlab-gpumem:actions` plugin).
 */
export interface IGpuMemActions {
  /** Emitted when the current session's actions change, or the current session does. */
  readonly changed: ISignal<IGpuMemActions, void>;
  /** The actions of the session the panel follows. */
  readonly current: ISessionActions | null;
  /** Emitted with any session's actions when they change (the inline checklists of every notebook listen). */
  readonly sessionChanged: ISignal<IGpuMemActions, ISessionActions>;
  /** The OOM checklist's ticks, per OOM occurrence. */
  readonly ticks: ITickStore;
  /** The actions of the notebook (or console) whose widget id is `widgetId`, or null. */
  forWidget(widgetId: string): ISessionActions | null;
  /** "notebook: <path>" / "console: <path>" for a kernel of this server, else null. */
  labelKernel(kernelId: string): string | null;
  /** True for another kernel of this server. */
  canShutDownKernel(kernelId: string): boolean;
  /** Shut down another kernel of this server (asks first); true when it was shut down. */
  shutDownKernel(kernelId: string): Promise<boolean>;
}

/** The token that provides the actions. */
export const IGpuMemActions = new Token<IGpuMemActions>(
  'jupyterlab-gpumem:IGpuMemActions',
  'Clear GPU memory, restart and free, the OOM checklist, per open notebook.'
);

/** The kernel process a notebook is connected to, as its `hello` names it. */
export interface IKernelIdentity {
  readonly pid: number;
  /** psutil create_time; null when the kernel could not tell. */
  readonly createTime: number | null;
}

/** What a timeline can be exported as: PyTorch's snapshot pickle (memory_viz opens it) or a CSV. */
export type TimelineExportFormat = 'snapshot' | 'csv';

/** A file the kernel made (reply.schema.json#/$defs/timeline_export_result). */
export interface ITimelineFile {
  readonly id: string;
  readonly format: TimelineExportFormat;
  readonly filename: string;
  readonly media_type: string;
  /** The bytes, base64. */
  readonly data: string;
  readonly bytes: number;
}

/**
 * What the inline renderers (cell outputs) may do: the OOM checklist's buttons and ticks, the analysis
 * output's "Insert code" and the timeline's downloads. Without it (the actions plugin is disabled) the inline
 * checklist shows advice and code only, and the analysis output no "Insert code" button — no buttons that
 * would do nothing.
 */
export interface IInlineHost {
  /** Ticks per OOM occurrence (`occurrenceKey(payload)`). */
  readonly ticks: ITickStore;
  /**
   * Emitted when what an inline checklist shows may have changed: ticks, a clear or restart of any notebook
   * (progress and result under the step that started it), the connected kernel process.
   */
  readonly changed: ISignal<unknown, void>;
  /** The path of the notebook whose output contains `node`, or null (not in a notebook). */
  pathOf(node: HTMLElement): string | null;
  /** Run a step's action for the notebook whose output contains `node`; `key`: the checklist's occurrence. */
  run(node: HTMLElement, step: IOomStep, key: string): void;
  /** True while a clear or restart of that notebook runs. */
  busy(node: HTMLElement): boolean;
  /** What the clear or restart that step `stepId` of occurrence `key` started says (null: it started none). */
  feedback(node: HTMLElement, key: string, stepId: string): IStepFeedback | null;
  /** The kernel process of the notebook that holds `node`, once connected (null: unknown). */
  kernelOf(node: HTMLElement): IKernelIdentity | null;
  /** "notebook: a.ipynb" for a kernel of this server. */
  labelKernel(kernelId: string): string | null;
  /** Copies to the clipboard; may return a promise (the button says "Copied" once it resolved). */
  copy(text: string): unknown;
  /** Insert `code` as a new cell below the output that contains `node`. */
  insertCode(node: HTMLElement, code: string): void;
  /**
   * A file made by the kernel of the notebook that holds `node` from the full timeline `id` it keeps (the
   * `timeline_export` request). Rejects with an Error of one line: no kernel, a kernel too old to export, or
   * one that no longer holds that timeline (it restarted).
   */
  exportTimeline?(node: HTMLElement, id: string, format: TimelineExportFormat): Promise<ITimelineFile>;
}

/**
 * The token of the inline host (from the `jupyterlab-gpumem:inline-host` plugin): MIME renderers are created by
 * the rendermime registry, which hands them no application, so the plugin that registers them takes the host
 * from here and gives it to each renderer it creates.
 */
export const IInlineHost = new Token<IInlineHost>(
  'jupyterlab-gpumem:IInlineHost',
  'What the gpumem cell outputs may do: run an OOM checklist step, tick it, insert code, export a timeline.'
);

/**
 * Where the full OOM checklists are: the cell outputs under the tracebacks of the open notebooks. The panel
 * shows the diagnosis and the first steps only, and links there.
 */
export interface IOomOutputs {
  /** True when the notebook `widgetId` has a cell output with the checklist of occurrence `occurrenceId`. */
  has(widgetId: string, occurrenceId: string): boolean;
  /** Bring that output into view and focus it; false when the notebook no longer holds it. */
  reveal(widgetId: string, occurrenceId: string): Promise<boolean>;
}

/** The token of the open notebooks' OOM checklist outputs (from the `jupyterlab-gpumem:oom-outputs` plugin). */
export const IOomOutputs = new Token<IOomOutputs>(
  'jupyterlab-gpumem:IOomOutputs',
  "The OOM checklists in the open notebooks' cell outputs, which the panel's brief checklist links to."
);
