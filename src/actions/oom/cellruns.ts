/**
 * Which cell each execution of a session ran, and how it ended: what links an out-of-memory error to its cell,
 * and tells when a later run of that cell ran without error (the checklist is then marked resolved).
 *
 * JupyterLab's notebook names the cell in the execute request it sends (`metadata.cellId`); the kernel's IOPub
 * gives the code and execution count (`execute_input`), an `error`, and the request's end (its `idle` status).
 * Silent executions (the extension's own calls) broadcast no `execute_input`, so only the user's runs count.
 * Without a cell id (a client that sends none) a run is known by its code. Pure: the OOM checklist model feeds
 * it the messages.
 */
import type { IIopubLike } from './detect';
import { field, parentIdOf } from './detect';

/** One execution of the user's code. */
export interface ICellRun {
  /** The execute request's msg_id (the parent of its IOPub messages). */
  readonly msgId: string;
  /** The notebook cell's id, as JupyterLab sent it; null when the request named none. */
  readonly cellId: string | null;
  /** The code run (from `execute_input`), null before it arrived. */
  readonly code: string | null;
  /** "In [N]": the execution count from `execute_input`, null when the kernel gave none. */
  readonly executionCount: number | null;
}

/** How many executions are remembered (the newest): one notebook session runs far fewer between two OOMs. */
const MAX_RUNS = 512;

/** True when two runs are of the same cell: by cell id when both have one, else by the same code. */
export function sameCell(a: ICellRun, b: ICellRun): boolean {
  if (a.cellId !== null && b.cellId !== null) {
    return a.cellId === b.cellId;
  }
  return a.cellId === null && b.cellId === null && a.code !== null && a.code === b.code;
}

export class CellRuns {
  /** `ended(run, ok)`: a run of the user's code ended, `ok` when it raised no error. */
  constructor(ended: (run: ICellRun, ok: boolean) => void) {
    this._onEnd = ended;
  }

  /** The run of request `msgId`, or null when it is not (or no longer) known. */
  run(msgId: string | null): ICellRun | null {
    return msgId === null ? null : (this._runs.get(msgId) ?? null);
  }

  /** A message JupyterLab's kernel connection sent or received (`Kernel.IAnyMessageArgs`). */
  sent(args: unknown): void {
    if (field(args, 'direction') !== 'send') {
      return;
    }
    const msg = field(args, 'msg');
    if (field(field(msg, 'header'), 'msg_type') !== 'execute_request') {
      return;
    }
    const msgId = field(field(msg, 'header'), 'msg_id');
    const cellId = field(field(msg, 'metadata'), 'cellId');
    if (typeof msgId === 'string' && msgId !== '' && field(field(msg, 'content'), 'silent') !== true) {
      this._cellIds.set(msgId, typeof cellId === 'string' && cellId !== '' ? cellId : null);
      this._bound(this._cellIds);
    }
  }

  /** An IOPub message of the session. */
  iopub(msg: IIopubLike): void {
    const msgId = parentIdOf(msg);
    if (msgId === null) {
      return;
    }
    switch (msg.header.msg_type) {
      case 'execute_input': {
        const code = field(msg.content, 'code');
        const count = field(msg.content, 'execution_count');
        this._runs.set(msgId, {
          msgId,
          cellId: this._cellIds.get(msgId) ?? null,
          code: typeof code === 'string' ? code : null,
          executionCount: typeof count === 'number' ? count : null
        });
        this._bound(this._runs);
        break;
      }
      case 'error':
        this._failed.add(msgId);
        break;
      case 'status': {
        const run = this._runs.get(msgId);
        if (
          field(msg.content, 'execution_state') === 'idle' &&
          run !== undefined &&
          !this._ended.has(msgId)
        ) {
          this._ended.add(msgId);
          const ok = !this._failed.has(msgId);
          this._failed.delete(msgId);
          this._onEnd(run, ok);
        }
        break;
      }
    }
  }

  private _bound(map: Map<string, unknown>): void {
    while (map.size > MAX_RUNS) {
      const oldest = map.keys().next().value as string;
      map.delete(oldest);
      this._ended.delete(oldest);
    }
  }

  private readonly _onEnd: (run: ICellRun, ok: boolean) => void;
  /** The cell of each execute request sent, by msg_id. */
  private readonly _cellIds = new Map<string, string | null>();
  /** The runs seen on IOPub, by msg_id, oldest first. */
  private readonly _runs = new Map<string, ICellRun>();
  /** Runs that raised an error and have not ended yet. */
  private readonly _failed = new Set<string>();
  /** Runs whose end was reported (a second idle of the same request is not a second end). */
  private readonly _ended = new Set<string>();
}
