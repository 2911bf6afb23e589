/**
 * Types shared by the public interfaces (tokens.ts) and the modules that implement them: the bridge's state,
 * the server's sessions, an OOM error, the restart report and a checklist step's feedback line.
 *
 * They live at the bottom, importing nothing of ours, so that tokens.ts can name them without depending on the
 * channel or the actions; the modules that compute them re-export them under their old names.
 */

/** Every state the panel can be in. */
export type StateName =
  | 'no-kernel'
  | 'unsupported'
  | 'waiting'
  | 'not-installed'
  | 'autoload-off'
  | 'version-mismatch'
  | 'live'
  | 'stale'
  | 'dead'
  | 'error';

/** What a `waiting` state waits for. */
export type WaitingPhase = 'starting' | 'restarting' | 'bootstrapping' | 'opening';

/**
 * How the kernel's previous process ended, for the panel to say so after the fact: JupyterLab reports a
 * restart someone asked for as 'restarting'; a process that died and that the server restarted as
 * 'restarting' then 'autorestarting'; one the server could not (or would not) restart as 'dead'.
 */
export interface IKernelEnd {
  readonly cause: 'restarted' | 'died';
  /** For `died`: the server started a new kernel process on its own. */
  readonly restartedByServer: boolean;
  /** Date.now() when it was noticed. */
  readonly at: number;
}

/** The bridge's state; immutable (each event gives a new object, or the same one when nothing changed). */
export interface IBridgeState {
  readonly name: StateName;
  /** Set in `waiting`. */
  readonly phase: WaitingPhase | null;
  /** The kernel's display name, e.g. "Python 3 (ipykernel)"; null without a kernel. */
  readonly kernelName: string | null;
  /** `language_info.name` once known. */
  readonly language: string | null;
  /** `no-kernel`: true when a notebook/console is open but has no kernel (as opposed to none open). */
  readonly hasSession: boolean;
  /** `error`: the one-line problem; `not-installed`: what Python said. */
  readonly detail: string | null;
  /** `error`: true when the kernel closed the comm (as opposed to a problem described by `detail`). */
  readonly closedByKernel: boolean;
  /** `version-mismatch`: the protocol the kernel speaks. */
  readonly kernelProtocol: number | null;
  /** The version of the Python package in the kernel, once known. */
  readonly kernelVersion: string | null;
  /** Seconds between samples (from `hello`), for stale detection. */
  readonly interval: number;
  /** Date.now() of the last sample (or of `hello`); null before. */
  readonly lastSampleAt: number | null;
  /** How this session's kernel process last ended (restart, death); null since the kernel was chosen. */
  readonly lastEnd: IKernelEnd | null;
  /**
   * True from a restart or death until the next `hello`: one episode. JupyterLab reports a server restart
   * as 'restarting', 'autorestarting', then (once the new process is up, often after our reconnect began)
   * the new process's own 'starting': within one episode, a later 'starting' is no second restart.
   */
  readonly endPending: boolean;
}

/** What the server says about a kernel's session. */
export interface IKernelSession {
  /** The session id (what the sessions API shuts down). */
  readonly id: string;
  readonly path: string;
  readonly type: string;
  readonly name: string;
}

/** What the browser keeps of an OOM `error` message. */
export interface IOomError {
  readonly ename: string;
  readonly evalue: string;
  /** The failing request's msg_id (the cell's `execute_request`): follow-ups wait for its end. */
  readonly parentId: string | null;
}

/** The steps, for the panel's progress line. */
export type RestartPhase = 'confirming' | 'recording' | 'restarting' | 'waiting' | 'checking' | 'done';

/** How the restart ended. */
export type RestartOutcome =
  /** The old PID left NVML's lists: `devices` says what that freed. */
  | 'freed'
  /** No NVIDIA GPU visible: nothing to free on a GPU. */
  | 'no-gpu'
  /** NVML never listed the old kernel: it held no GPU memory. */
  | 'nothing-held'
  /** The old PID was still listed when the time ran out. */
  | 'timeout'
  /** The panel was not connected before (or after) the restart: no figures to compare. */
  | 'unknown';

/** Memory freed on one device. */
export interface IDeviceFreed {
  readonly label: string;
  readonly name: string | null;
  /** NVML's figure for the old PID before the restart. */
  readonly before: number | null;
  /** NVML's figure for the old PID now (0: no longer listed). */
  readonly after: number | null;
  readonly freed: number | null;
  readonly deviceUsedBefore: number | null;
  readonly deviceUsedAfter: number | null;
}

/** An old child that still runs after the restart (the same process: PID and start time match). */
export interface ILeftover {
  readonly pid: number;
  readonly createTime: number;
  readonly name: string | null;
  readonly gpuUsed: number | null;
  /** Set once the user ended it or the kernel refused to. */
  readonly ended?: boolean;
  readonly refused?: string;
}

/** What the panel shows after a restart-and-free. */
export interface IRestartReport {
  readonly outcome: RestartOutcome;
  readonly oldPid: number | null;
  readonly newPid: number | null;
  readonly devices: ReadonlyArray<IDeviceFreed>;
  /** Sum of `freed` over the devices (null when no device had a figure). */
  readonly totalFreed: number | null;
  readonly noGpuReason: string | null;
  readonly waitedMs: number;
  readonly timeoutMs: number;
  readonly clearedOutputs: boolean;
  /** Old children still running (only those: never other processes). */
  readonly leftovers: ReadonlyArray<ILeftover>;
  /** How many children the old kernel had. */
  readonly childrenBefore: number;
  /** Why the children could not be checked, if they could not. */
  readonly childrenProblem: string | null;
  /**
   * After a timeout: whether the old kernel process itself still runs (true), has exited while the driver
   * still lists its PID (false), or could not be asked (null).
   */
  readonly oldKernelAlive: boolean | null;
}

/** What a step says about the action it started. */
export interface IStepFeedback {
  /** 'history': it ended in an earlier kernel run (what it said then, no longer about this kernel). */
  readonly phase: 'running' | 'done' | 'failed' | 'history';
  readonly text: string;
}
