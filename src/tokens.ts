/**
 * The public interface of jupyterlab-gpumem, for this extension's views and for later extensions (the OOM
 * checklist, the analysis renderer) that want the current kernel's GPU memory without opening a second comm.
 */
import type { ISessionContext } from '@jupyterlab/apputils';
import type { Kernel } from '@jupyterlab/services';
import { Token } from '@lumino/coreutils';
import type { ISignal } from '@lumino/signaling';

import type { IKernelProblem } from './channel/bridge';
import type { IKernelSession } from './channel/model';
import type {
  IGpuProcess,
  IHello,
  IRequestArgs,
  IRequestResults,
  ISample,
  RequestAction
} from './wire/protocol';
import type { IBridgeView, SessionActions } from './actions/sessionactions';
import type { IGpuMemSettings } from './settings';
import type { IBridgeState } from './channel/state';
import type { TickStore } from './actions/ticks';

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
 * Clear, restart-and-free, the OOM checklist and "shut down kernel", per open notebook or console
 * (from the `jupyterlab-gpumem:actions` plugin).
 */
export interface IGpuMemActions {
  /** Emitted when the current session's actions change, or the current session does. */
  readonly changed: ISignal<IGpuMemActions, void>;
  /** The actions of the session the panel follows. */
  readonly current: SessionActions | null;
  /** The OOM checklist's ticks, per notebook. */
  readonly ticks: TickStore;
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
