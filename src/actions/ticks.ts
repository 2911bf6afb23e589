/**
 * The OOM checklist's ticks, remembered per OOM occurrence: one out-of-memory error in one kernel run.
 *
 * A tick says "I tried this for that error". Keyed by the notebook, ticks of an OOM before a restart showed
 * on the next, different OOM ("Clear GPU memory" already ticked and struck through): each checklist the
 * kernel builds now carries an occurrence id (`occurrence.id` in the payload), and its ticks live under that
 * id, so a new error starts unticked while the panel and the cell output of the same error share theirs.
 *
 * Stored in JupyterLab's state database (IStateDB, the browser-side workspace state) as one entry holding
 * the most recently ticked occurrences (at most MAX_OCCURRENCES), so reloading the page keeps the ticks of
 * the errors still shown, and the database does not grow with every error ever seen. Not in the notebook's
 * metadata, which would mark the file as changed and travel with it to colleagues. Without a state database
 * (tests, a stripped-down app) ticks last until the page reloads.
 */
import type { ReadonlyPartialJSONValue } from '@lumino/coreutils';
import { type ISignal, Signal } from '@lumino/signaling';

import type { ITickStore } from '../tokens';
import type { IOomPayload } from '../wire/protocol';

/** The part of IStateDB this store uses. */
export interface ITickDatabase {
  fetch(id: string): Promise<unknown>;
  save(id: string, value: ReadonlyPartialJSONValue): Promise<void>;
  remove(id: string): Promise<void>;
}

/** The state-database entry holding every remembered occurrence's ticks. */
export const TICKS_DB_KEY = 'jupyterlab-gpumem:oom-ticks';

/** How many occurrences keep their ticks (the least recently ticked are forgotten first). */
export const MAX_OCCURRENCES = 50;

/** The most step ids one occurrence keeps (a checklist has about a dozen steps). */
const MAX_STEPS = 64;

/** 32-bit FNV-1a of a string, as 8 hex digits. */
function fnv1a(text: string): string {
  let hash = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    hash ^= text.charCodeAt(i);
    hash = Math.imul(hash, 0x01000193);
  }
  return (hash >>> 0).toString(16).padStart(8, '0');
}

/**
 * The key of a checklist's ticks: its occurrence id, or — for an output saved by an older kernel package,
 * which wrote none — a digest of what it says (the same saved output keeps its ticks; another error's
 * message differs in its figures).
 */
export function occurrenceKey(payload: IOomPayload): string {
  const id = payload.occurrence?.id;
  if (typeof id === 'string' && id !== '') {
    return `oom:${id}`;
  }
  return `saved:${fnv1a(JSON.stringify([payload.summary, payload.info]))}`;
}

/** The origin of a clear or restart a checklist step started: that step of one OOM occurrence. */
export function stepOrigin(key: string, stepId: string): string {
  return `${key}#${stepId}`;
}

/** The stored form: occurrences oldest first, each with its ticked step ids. */
interface IStored {
  readonly version: 1;
  readonly entries: ReadonlyArray<{ readonly key: string; readonly ticks: ReadonlyArray<string> }>;
}

function parseStored(value: unknown): Array<[string, ReadonlySet<string>]> {
  if (typeof value !== 'object' || value === null || (value as { version?: unknown }).version !== 1) {
    return [];
  }
  const entries = (value as { entries?: unknown }).entries;
  if (!Array.isArray(entries)) {
    return [];
  }
  const result: Array<[string, ReadonlySet<string>]> = [];
  for (const entry of entries.slice(-MAX_OCCURRENCES)) {
    if (typeof entry !== 'object' || entry === null) {
      continue;
    }
    const { key, ticks } = entry as { key?: unknown; ticks?: unknown };
    if (typeof key !== 'string' || !Array.isArray(ticks)) {
      continue;
    }
    const ids = ticks.filter((id): id is string => typeof id === 'string').slice(0, MAX_STEPS);
    if (ids.length > 0) {
      result.push([key, new Set(ids)]);
    }
  }
  return result;
}

export class TickStore implements ITickStore {
  constructor(db: ITickDatabase | null) {
    this._db = db;
  }

  /** Emitted with the occurrence key whose ticks changed (or finished loading). */
  get changed(): ISignal<this, string> {
    return this._changed;
  }

  /** The ticked step ids of an occurrence (empty until loaded: `changed` fires when they arrive). */
  ticks(key: string): ReadonlySet<string> {
    void this._loadOnce();
    return this._ticks.get(key) ?? EMPTY;
  }

  /** Tick or untick one step of an occurrence. */
  set(key: string, stepId: string, ticked: boolean): void {
    const next = new Set(this._ticks.get(key) ?? EMPTY);
    if (ticked) {
      next.add(stepId);
    } else {
      next.delete(stepId);
    }
    this._put(key, next);
  }

  /** Untick every step of an occurrence. */
  reset(key: string): void {
    this._put(key, EMPTY);
  }

  /** Remember `ticks` as the most recent occurrence; forget the oldest beyond the bound. */
  private _put(key: string, ticks: ReadonlySet<string>): void {
    this._touched.add(key);
    this._ticks.delete(key); // re-inserted last: Map keeps insertion order, the oldest come first
    if (ticks.size > 0) {
      this._ticks.set(key, ticks);
    }
    const dropped: string[] = [];
    while (this._ticks.size > MAX_OCCURRENCES) {
      const oldest = this._ticks.keys().next().value as string;
      this._ticks.delete(oldest);
      dropped.push(oldest);
    }
    this._changed.emit(key);
    for (const old of dropped) {
      this._changed.emit(old);
    }
    this._save();
  }

  private _loadOnce(): Promise<void> {
    if (this._loading === null) {
      this._loading = this._load();
    }
    return this._loading;
  }

  private async _load(): Promise<void> {
    if (this._db === null) {
      this._loaded = true;
      return;
    }
    let stored: unknown = null;
    try {
      stored = await this._db.fetch(TICKS_DB_KEY);
    } catch {
      // Nothing stored that we can read: start empty.
    }
    // Ticks set before loading finished win; the stored ones go before them (they are older).
    const current = [...this._ticks.entries()];
    const loaded = parseStored(stored).filter(([key]) => !this._touched.has(key));
    this._ticks.clear();
    for (const [key, ticks] of [...loaded, ...current].slice(-MAX_OCCURRENCES)) {
      this._ticks.set(key, ticks);
    }
    this._loaded = true;
    for (const [key] of loaded) {
      this._changed.emit(key);
    }
    if (this._touched.size > 0) {
      this._save();
    }
  }

  private _save(): void {
    if (this._db === null) {
      return;
    }
    if (!this._loaded) {
      // Writing now would drop the stored occurrences: the load merges them, then saves.
      void this._loadOnce();
      return;
    }
    const value: IStored = {
      version: 1,
      entries: [...this._ticks.entries()].map(([key, ticks]) => ({ key, ticks: [...ticks].sort() }))
    };
    this._db.save(TICKS_DB_KEY, value as unknown as ReadonlyPartialJSONValue).catch(error => {
      console.warn('jupyterlab-gpumem: could not remember the checklist ticks', error);
    });
  }

  private readonly _db: ITickDatabase | null;
  private readonly _ticks = new Map<string, ReadonlySet<string>>();
  /** Keys set or reset here since the page loaded (they win over what the database holds). */
  private readonly _touched = new Set<string>();
  private _loading: Promise<void> | null = null;
  private _loaded = false;
  private readonly _changed = new Signal<this, string>(this);
}

const EMPTY: ReadonlySet<string> = new Set<string>();
