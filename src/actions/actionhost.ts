/**
 * JupyterLab's side of the session actions, as an interface: dialogs, notifications, the notebook's cells,
 * other kernels and the server's word on a kernel's death. labhost.ts implements it for JupyterLab; the unit
 * tests use fakes.
 */
import type { Trans } from '../ui/i18n';
import type { IHostMemory, IKernelExit, IOomPayload } from '../wire/protocol';
import type { IGpuMemSettings } from '../settings';
import type { IOomError } from './oom/detect';
import type { ISessionActions } from '../tokens';

/** Where a cell goes. */
export type CellPlace = 'below-active' | 'top';

/** JupyterLab's side of the actions (dialogs, notifications, the notebook, other kernels). */
export interface IActionHost {
  readonly trans: Trans;
  settings(): IGpuMemSettings;
  /** Ask before restarting (only called when the `confirmRestart` setting is on). */
  confirmRestart(actions: ISessionActions, clearOutputs: boolean): Promise<boolean>;
  /** An OOM was seen on this session's IOPub (raise the notification). */
  notifyOom(actions: ISessionActions, error: IOomError): void;
  /** Clear every output of the session's notebook, like "Restart Kernel and Clear Outputs". */
  clearOutputs(actions: ISessionActions): void;
  /** Insert a code cell (not run). False when the session has no notebook. */
  insertCell(actions: ISessionActions, code: string, place: CellPlace): boolean;
  /** Shut down another kernel of this server (asks first); resolves true when it was shut down. */
  shutDownKernel(kernelId: string): Promise<boolean>;
  /**
   * Ask the server why kernel process `pid` of `kernelId` died (POST /gpumem/kernels/<id>/exit), sending the
   * kernel's last host reading for the checklist. `exit` null: the server has seen no death of it (yet); null:
   * no answer (the server extension is not enabled, or the answer did not fit the schema).
   */
  kernelExit(kernelId: string, pid: number | null, host: IHostMemory | null): Promise<IDeathAnswer | null>;
  /** The out-of-memory killer ended this session's kernel (raise the notification). */
  notifyOomKill(actions: ISessionActions, death: IKernelExit, summary: ReadonlyArray<string>): void;
}

/** What the server says of a kernel's death, its host checklist checked. */
export interface IDeathAnswer {
  readonly exit: IKernelExit | null;
  readonly checklist: IOomPayload | null;
}
