/**
 * The OOM checklist's ticks, remembered per notebook.
 *
 * Stored in JupyterLab's state database (IStateDB, the browser-side workspace state), keyed by the
 * notebook's path — not in the notebook's metadata, which would mark the file as changed and travel with it
 * to colleagues. A renamed notebook starts with no ticks. Without a state database (tests, a stripped-down
 * app) ticks last until the page reloads.
 */
import { type ISignal, Signal } from '@lumino/signaling';

import type { ITickStore } from '../tokens';

/** The part of IStateDB this store uses. */
export interface ITickDatabase {
  fetch(id: string): Promise<unknown>;
  save(id: string, value: string[]): Promise<void>;
  remove(id: string): Promise<void>;
}

/** The state-database key of a notebook's ticks. */
export function ticksKey(path: string): string {
  return `jupyterlab-gpumem:oom-ticks:${path}`;
}

export class TickStore implements ITickStore {
  constructor(db: ITickDatabase | null) {
    this._db = db;
  }

  /** Emitted with the notebook path whose ticks changed (or finished loading). */
  get changed(): ISignal<this, string> {
    return this._changed;
  }

  /** The ticked step ids of a notebook (empty until loaded: `changed` fires when they arrive). */
  ticks(path: string): ReadonlySet<string> {
    const known = this._ticks.get(path);
    if (known !== undefined) {
      return known;
    }
    const empty = new Set<string>();
    this._ticks.set(path, empty);
    void this._load(path);
    return empty;
  }

  /** Tick or untick one step. */
  set(path: string, stepId: string, ticked: boolean): void {
    const next = new Set(this.ticks(path));
    if (ticked) {
      next.add(stepId);
    } else {
      next.delete(stepId);
    }
    this._ticks.set(path, next);
    this._changed.emit(path);
    this._save(path, next);
  }

  /** Untick every step of a notebook. */
  reset(path: string): void {
    this._ticks.set(path, new Set());
    this._changed.emit(path);
    this._db?.remove(ticksKey(path)).catch(() => undefined);
  }

  private async _load(path: string): Promise<void> {
    if (this._db === null) {
      return;
    }
    let stored: unknown;
    try {
      stored = await this._db.fetch(ticksKey(path));
    } catch {
      return;
    }
    if (!Array.isArray(stored)) {
      return;
    }
    const loaded = new Set(stored.filter((id): id is string => typeof id === 'string'));
    // A tick set before loading finished wins over the stored ones.
    const current = this._ticks.get(path);
    if (current !== undefined && current.size > 0) {
      return;
    }
    this._ticks.set(path, loaded);
    this._changed.emit(path);
  }

  private _save(path: string, ticks: ReadonlySet<string>): void {
    this._db?.save(ticksKey(path), [...ticks].sort()).catch(error => {
      console.warn('jupyterlab-gpumem: could not remember the checklist ticks', error);
    });
  }

  private readonly _db: ITickDatabase | null;
  private readonly _ticks = new Map<string, ReadonlySet<string>>();
  private readonly _changed = new Signal<this, string>(this);
}
