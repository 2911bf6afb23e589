/**
 * @jest-environment node
 *
 * The checklist's ticks belong to one OOM occurrence (one error in one kernel run), not to the notebook:
 * a new error starts unticked, a page reload keeps the ticks of the errors still shown, and the state
 * database holds a bounded number of occurrences.
 */
import { MAX_OCCURRENCES, occurrenceKey, TICKS_DB_KEY, TickStore } from '../ticks';
import { oom1x, oom2x } from '../../__tests__/payloads';
import type { IOomPayload } from '../../wire/protocol';

/** A checklist payload of occurrence `id` (kernel PID 1234). */
function oomOf(id: string, base: IOomPayload = oom2x()): IOomPayload {
  return { ...base, occurrence: { id, kernel_pid: 1234, kernel_start: 1763855000.5, time: 1763855100 } };
}

/** An in-memory IStateDB. */
class FakeDb {
  readonly values = new Map<string, unknown>();
  saves = 0;
  /** Resolves fetches only when released (a slow database). */
  hold = false;
  private _waiting: Array<() => void> = [];

  async fetch(id: string): Promise<unknown> {
    if (this.hold) {
      await new Promise<void>(resolve => this._waiting.push(resolve));
    }
    return JSON.parse(JSON.stringify(this.values.get(id) ?? null));
  }

  async save(id: string, value: unknown): Promise<void> {
    this.saves++;
    this.values.set(id, JSON.parse(JSON.stringify(value)));
  }

  async remove(id: string): Promise<void> {
    this.values.delete(id);
  }

  release(): void {
    this.hold = false;
    this._waiting.splice(0).forEach(resolve => resolve());
  }

  /** The stored occurrence keys, oldest first. */
  keys(): string[] {
    const stored = this.values.get(TICKS_DB_KEY) as { entries: Array<{ key: string }> } | undefined;
    return stored?.entries.map(e => e.key) ?? [];
  }
}

const tick = (): Promise<void> => new Promise(resolve => setTimeout(resolve, 0));

describe('occurrenceKey', () => {
  it('is the kernel’s occurrence id, so each error has its own ticks', () => {
    expect(occurrenceKey(oomOf('a1'))).toBe('oom:a1');
    // The same message raised twice is two errors.
    expect(occurrenceKey(oomOf('a1'))).not.toBe(occurrenceKey(oomOf('b2')));
  });

  it('falls back to a digest of what an output saved by an older kernel says', () => {
    const saved = oom2x();
    expect(saved.occurrence).toBeUndefined();
    expect(occurrenceKey(saved)).toMatch(/^saved:[0-9a-f]{8}$/);
    expect(occurrenceKey(oom2x())).toBe(occurrenceKey(saved));
    expect(occurrenceKey(oom1x())).not.toBe(occurrenceKey(saved));
  });
});

describe('TickStore', () => {
  it('keeps ticks per occurrence: a new error starts unticked', () => {
    const store = new TickStore(null);
    const first = occurrenceKey(oomOf('first'));
    const second = occurrenceKey(oomOf('second'));
    store.set(first, 'clear', true);
    store.set(first, 'restart', true);
    expect([...store.ticks(first)].sort()).toEqual(['clear', 'restart']);
    expect([...store.ticks(second)]).toEqual([]);
    store.set(first, 'clear', false);
    expect([...store.ticks(first)]).toEqual(['restart']);
    store.reset(first);
    expect([...store.ticks(first)]).toEqual([]);
  });

  it('keeps the ticks of an error still shown across a page reload', async () => {
    const db = new FakeDb();
    const before = new TickStore(db);
    const key = occurrenceKey(oomOf('shown'));
    before.ticks(key);
    await tick();
    before.set(key, 'clear', true);
    await tick();
    expect(db.values.get(TICKS_DB_KEY)).toEqual({ version: 1, entries: [{ key, ticks: ['clear'] }] });

    const after = new TickStore(db); // the reloaded page
    const changes: string[] = [];
    after.changed.connect((_, k) => changes.push(k));
    expect([...after.ticks(key)]).toEqual([]); // not loaded yet: `changed` says when they arrive
    await tick();
    expect([...after.ticks(key)]).toEqual(['clear']);
    expect(changes).toEqual([key]);
    expect([...after.ticks(occurrenceKey(oomOf('new')))]).toEqual([]);
  });

  it('forgets the least recently ticked occurrences beyond the bound', async () => {
    const db = new FakeDb();
    const store = new TickStore(db);
    store.ticks('oom:x');
    await tick();
    for (let i = 0; i < MAX_OCCURRENCES + 10; i++) {
      store.set(`oom:${i}`, 'clear', true);
    }
    store.set('oom:3', 'restart', true); // touched again: now the most recent
    await tick();
    const keys = db.keys();
    expect(keys).toHaveLength(MAX_OCCURRENCES);
    expect(keys[keys.length - 1]).toBe('oom:3');
    expect(keys).not.toContain('oom:0');
    expect(keys).toContain(`oom:${MAX_OCCURRENCES + 9}`);
    expect([...store.ticks('oom:0')]).toEqual([]);
    // Unticking everything of an occurrence drops it from the database.
    store.reset('oom:3');
    await tick();
    expect(db.keys()).not.toContain('oom:3');
  });

  it('ticks set before the database answered win, and the stored ones are kept', async () => {
    const db = new FakeDb();
    db.values.set(TICKS_DB_KEY, {
      version: 1,
      entries: [
        { key: 'oom:old', ticks: ['batch-size'] },
        { key: 'oom:now', ticks: ['restart'] }
      ]
    });
    db.hold = true;
    const store = new TickStore(db);
    store.set('oom:now', 'clear', true); // before the load finished
    await tick();
    expect(db.saves).toBe(0); // writing now would drop the stored occurrences
    db.release();
    await tick();
    await tick();
    expect([...store.ticks('oom:now')]).toEqual(['clear']);
    expect([...store.ticks('oom:old')]).toEqual(['batch-size']);
    expect(db.values.get(TICKS_DB_KEY)).toEqual({
      version: 1,
      entries: [
        { key: 'oom:old', ticks: ['batch-size'] },
        { key: 'oom:now', ticks: ['clear'] }
      ]
    });
  });

  it('ignores what it cannot read', async () => {
    const db = new FakeDb();
    db.values.set(TICKS_DB_KEY, {
      version: 1,
      entries: [{ key: 3 }, null, { key: 'oom:a', ticks: [1, 'clear'] }]
    });
    const store = new TickStore(db);
    store.ticks('oom:a');
    await tick();
    expect([...store.ticks('oom:a')]).toEqual(['clear']);
    // The state database of an older version (ticks keyed by notebook path) is simply not read.
    const other = new FakeDb();
    other.values.set(TICKS_DB_KEY, ['clear']);
    const fresh = new TickStore(other);
    fresh.ticks('oom:a');
    await tick();
    expect([...fresh.ticks('oom:a')]).toEqual([]);
  });
});
