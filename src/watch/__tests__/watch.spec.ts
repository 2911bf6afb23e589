/**
 * The output-area watch (`%gpumem watch`): what its view shows from the kernel's messages, checked with the
 * panel's validators; the peak counts from the watch's start; a message that does not fit is one line; kernel
 * strings are text; the last view going away detaches the watch.
 */
import { GIB, device0, noGpuSample, sample, wire } from '../../__tests__/fixtures';
import { clearGpu, oom2x } from '../../__tests__/payloads';
import { type IWatchModel, render } from '../index';
import { WatchState } from '../state';
import { OOM_STEPS_SHOWN, renderWatch } from '../view';

function event(fields: Partial<Record<'stopped' | 'oom' | 'clear' | 'error', unknown>>): unknown {
  return wire({ type: 'watch_event', stopped: null, oom: null, clear: null, error: null, ...fields });
}

function sampleAt(seq: number, time: number, allocated: number): unknown {
  const s = sample(seq, time);
  const d = s.gpu.devices[0];
  s.gpu.devices = [
    { ...d, allocator: { ...d.allocator!, allocated, reserved: Math.max(allocated, 6 * GIB) } }
  ];
  return wire(s);
}

function drawn(state: WatchState, compact = false): HTMLElement {
  const root = document.createElement('div');
  renderWatch(root, state, compact, () => undefined);
  return root;
}

describe('WatchState', () => {
  it('takes the history and then each sample once, counting updates', () => {
    const state = new WatchState(0);
    expect(state.receive(wire({ type: 'history', samples: [sample(1, 100), sample(2, 101)] }))).toBe(true);
    expect(state.receive(wire(sample(2, 101)))).toBe(true); // already there: not counted again
    expect(state.receive(wire(sample(3, 102)))).toBe(true);
    expect(state.updates).toBe(3);
    expect(state.sample?.seq).toBe(3);
  });

  it('counts the peak from the watch start only, and keeps the chart to its span', () => {
    const state = new WatchState(200);
    state.receive(sampleAt(1, 100, 7 * GIB)); // before the watch: on the chart, not in the peak
    state.receive(sampleAt(2, 200, 6 * GIB));
    state.receive(sampleAt(3, 500, 6 * GIB));
    const key = device0().uuid!;
    expect(state.peak(key)?.kernel).toBe(6 * GIB + 512 * 1024 ** 2); // NVML's figure for the kernel
    expect(state.series(key).map(p => p.time)).toEqual([200, 500]); // 100 is older than five minutes
  });

  it('refuses a message that does not fit its schema, in one line, and keeps what it had', () => {
    const state = new WatchState(0);
    state.receive(wire(sample(1, 100)));
    const broken = { ...sample(2, 101), seq: 'two' };
    expect(state.receive(broken)).toBe(false);
    expect(state.problem).toMatch(/^gpumem watch: message refused: .*seq/);
    expect(state.problem).not.toContain('\n');
    expect(state.sample?.seq).toBe(1);
    expect(state.receive(event({ stopped: 42 }))).toBe(false);
  });
});

describe('renderWatch', () => {
  it('draws the bar, the numbers, the chart and the host line of each GPU', () => {
    const state = new WatchState(0);
    state.receive(wire(sample(1, 100)));
    state.receive(wire(sample(2, 101)));
    const root = drawn(state);
    expect(root.dataset.state).toBe('live');
    expect(root.dataset.seq).toBe('2');
    const first = root.querySelector('.jp-GpuMem-watchDevice')!;
    expect(first.textContent).toContain('cuda:0 · NVIDIA GeForce RTX 4080 SUPER');
    const segments = Array.from(first.querySelectorAll('.jp-GpuMem-seg')).map(s => s.className);
    expect(segments).toEqual([
      'jp-GpuMem-seg jp-GpuMem-seg-allocated',
      'jp-GpuMem-seg jp-GpuMem-seg-cached',
      'jp-GpuMem-seg jp-GpuMem-seg-context',
      'jp-GpuMem-seg jp-GpuMem-seg-others',
      'jp-GpuMem-seg jp-GpuMem-seg-free'
    ]);
    expect(first.querySelector('.jp-GpuMem-watchNumbers')!.textContent).toBe(
      '12.00 / 15.99 GiB used (75.0%) · this kernel 6.50 GiB · peak since watch 6.50 GiB · 37% busy'
    );
    expect(
      first.querySelector('polyline.jp-GpuMem-watchLine-kernel')!.getAttribute('points')!.split(' ')
    ).toHaveLength(2);
    expect(root.querySelector('.jp-GpuMem-watchHost')!.textContent).toContain('Host: kernel 3.00 GiB');
  });

  it("titles each GPU as the panel does: its size, a MIG slice's mark, a device the kernel cannot see", () => {
    const state = new WatchState(0);
    const s = sample(1, 100);
    s.gpu.devices = [
      { ...device0(), mig: true },
      { ...device0(), nvml_index: 1, cuda_index: null, name: null }
    ];
    state.receive(wire(s));
    const titles = Array.from(drawn(state).querySelectorAll('.jp-GpuMem-watchTitle')).map(t => t.textContent);
    expect(titles[0]).toMatch(/^cuda:0 · NVIDIA GeForce RTX 4080 SUPER · \d+(\.\d)? GiB · MIG$/);
    expect(titles[1]).toMatch(/^not visible to this kernel \(NVML 1\) · unknown GPU · /);
  });

  it('colours a device at the panel thresholds', () => {
    const state = new WatchState(0);
    const full = sample(1, 100);
    full.gpu.devices = [{ ...device0(), used: device0().total! - 1 * 1024 ** 2 }];
    state.receive(wire(full));
    expect(drawn(state).querySelector('.jp-GpuMem-watchDevice')!.getAttribute('data-level')).toBe('critical');
  });

  it('gives one line a device when compact, without chart or actions', () => {
    const state = new WatchState(0);
    state.receive(wire(sample(1, 100)));
    const root = drawn(state, true);
    expect(root.classList.contains('jp-GpuMem-watch-compact')).toBe(true);
    expect(root.querySelector('.jp-GpuMem-watchChart')).toBeNull();
    expect(root.querySelector('.jp-GpuMem-watchClear')).toBeNull();
  });

  it('says when no GPU is visible, and when the watch stopped', () => {
    const state = new WatchState(0);
    state.receive(wire(noGpuSample(1, 100)));
    state.receive(event({ stopped: 'stopped: run %gpumem watch to watch again' }));
    const root = drawn(state);
    expect(root.querySelector('.jp-GpuMem-nogpu')!.textContent).toMatch(
      /^No NVIDIA GPU visible to this kernel/
    );
    expect(root.dataset.state).toBe('stopped');
    expect(root.querySelector('.jp-GpuMem-watchStatus')!.textContent).toBe(
      'stopped: run %gpumem watch to watch again'
    );
  });

  it('shows the diagnosis and the first steps after an out-of-memory error, and the clear report', () => {
    const state = new WatchState(0);
    state.receive(wire(sample(1, 100)));
    state.receive(event({ oom: oom2x() }));
    state.receive(event({ clear: clearGpu() }));
    const root = drawn(state);
    const oom = root.querySelector('.jp-GpuMem-watchOom')!;
    expect(oom.textContent).toContain(oom2x().summary[0]);
    expect(oom.querySelectorAll('.jp-GpuMem-watchOomStep')).toHaveLength(
      Math.min(OOM_STEPS_SHOWN, oom2x().steps.length)
    );
    expect(root.querySelector('.jp-GpuMem-watchCleared')!.textContent).toMatch(/^Freed .* of GPU memory\.$/);
  });

  it('sets kernel strings as text, never as markup', () => {
    const state = new WatchState(0);
    const hostile = sample(1, 100);
    hostile.gpu.devices = [{ ...device0(), name: '<img src=x onerror=alert(1)>' }];
    state.receive(wire(hostile));
    const root = drawn(state);
    expect(root.querySelector('img')).toBeNull();
    expect(root.textContent).toContain('<img src=x onerror=alert(1)>');
  });
});

describe('the anywidget module', () => {
  class FakeModel implements IWatchModel {
    sent: unknown[] = [];
    private _handlers = new Map<string, Set<(...args: unknown[]) => void>>();
    get(name: 'compact' | 'started'): never {
      return (name === 'compact' ? false : 0) as never;
    }
    on(event: string, callback: (...args: unknown[]) => void): void {
      const set = this._handlers.get(event) ?? new Set();
      set.add(callback);
      this._handlers.set(event, set);
    }
    off(event: string, callback: (...args: unknown[]) => void): void {
      this._handlers.get(event)?.delete(callback);
    }
    send(content: unknown): void {
      this.sent.push(content);
    }
    kernelSends(content: unknown): void {
      this._handlers.get('msg:custom')?.forEach(cb => cb(content));
    }
  }

  it('asks for the history, redraws every view on a message, and detaches when the last view goes', () => {
    const model = new FakeModel();
    const a = document.createElement('div');
    const b = document.createElement('div');
    const cleanA = render({ model, el: a });
    const cleanB = render({ model, el: b });
    model.kernelSends(wire(sample(7, 100)));
    expect(a.querySelector('.jp-GpuMem-watch')!.getAttribute('data-seq')).toBe('7');
    expect(b.querySelector('.jp-GpuMem-watch')!.getAttribute('data-seq')).toBe('7');
    (a.querySelector('.jp-GpuMem-watchClear') as HTMLButtonElement).click();
    cleanA();
    expect(model.sent).toEqual([{ request: 'history' }, { request: 'history' }, { request: 'clear' }]);
    cleanB();
    expect(model.sent[model.sent.length - 1]).toEqual({ request: 'detach' });
  });
});
