import { untranslated } from '../../ui/i18n';
import {
  type BridgeEvent,
  describeState,
  type IBridgeState,
  INITIAL_STATE,
  INSTALL_COMMAND,
  LOAD_COMMAND,
  next,
  staleAfterMs
} from '../state';

/** Run events from a state; returns the final state. */
function run(events: BridgeEvent[], from: IBridgeState = INITIAL_STATE): IBridgeState {
  return events.reduce(next, from);
}

const T0 = 1_000_000;

const toLive: BridgeEvent[] = [
  { type: 'kernel-changed', kernelName: 'Python 3 (ipykernel)', hasSession: true },
  { type: 'kernel-status', status: 'idle' },
  { type: 'language', name: 'python' },
  { type: 'bootstrap-ok', version: '0.1.0', protocol: 1 },
  { type: 'hello', protocol: 1, version: '0.1.0', interval: 1, now: T0 },
  { type: 'sample', now: T0 + 100 }
];

function message(state: IBridgeState): string {
  return describeState(state, untranslated).text;
}

describe('state machine', () => {
  it('starts with no kernel', () => {
    expect(INITIAL_STATE.name).toBe('no-kernel');
    expect(message(INITIAL_STATE)).toBe('Open a notebook or console');
  });

  it('goes live through waiting phases', () => {
    const phases: string[] = [];
    toLive.reduce((state, event) => {
      const s = next(state, event);
      phases.push(s.name === 'waiting' ? `waiting:${s.phase}` : s.name);
      return s;
    }, INITIAL_STATE);
    expect(phases).toEqual([
      'waiting:starting',
      'waiting:starting',
      'waiting:bootstrapping',
      'waiting:opening',
      'live',
      'live'
    ]);
    const live = run(toLive);
    expect(live.kernelName).toBe('Python 3 (ipykernel)');
    expect(live.kernelVersion).toBe('0.1.0');
    expect(live.lastSampleAt).toBe(T0 + 100);
  });

  it('returns the same object when nothing changes', () => {
    const live = run(toLive);
    expect(next(live, { type: 'kernel-status', status: 'busy' })).toBe(live);
    expect(next(live, { type: 'tick', now: T0 + 1000 })).toBe(live);
  });

  it('follows a kernel change, and no kernel', () => {
    const live = run(toLive);
    const other = next(live, { type: 'kernel-changed', kernelName: 'Python 3 (gpu)', hasSession: true });
    expect(other.name).toBe('waiting');
    expect(other.kernelName).toBe('Python 3 (gpu)');
    expect(other.kernelVersion).toBeNull();
    expect(other.lastSampleAt).toBeNull();
    const none = next(live, { type: 'kernel-changed', kernelName: null, hasSession: true });
    expect(none.name).toBe('no-kernel');
    expect(message(none)).toContain('This notebook has no kernel');
  });

  it('re-bootstraps after a restart', () => {
    const restarting = next(run(toLive), { type: 'kernel-status', status: 'restarting' });
    expect(restarting).toMatchObject({ name: 'waiting', phase: 'restarting', lastSampleAt: null });
    expect(message(restarting)).toBe('Kernel restarting…');
    // A sample from the old comm must not bring it back to live.
    expect(next(restarting, { type: 'sample', now: T0 + 5000 })).toBe(restarting);
    const again = run(
      [
        { type: 'kernel-status', status: 'starting' },
        { type: 'kernel-status', status: 'idle' },
        { type: 'language', name: 'python' },
        { type: 'bootstrap-ok', version: '0.1.0', protocol: 1 },
        { type: 'hello', protocol: 1, version: '0.1.0', interval: 1, now: T0 + 9000 }
      ],
      restarting
    );
    expect(again.name).toBe('live');
    const auto = next(run(toLive), { type: 'kernel-status', status: 'autorestarting' });
    expect(auto.phase).toBe('restarting');
  });

  it('says which kernels are unsupported', () => {
    const r = run([
      { type: 'kernel-changed', kernelName: 'R', hasSession: true },
      { type: 'language', name: 'R' }
    ]);
    expect(r.name).toBe('unsupported');
    expect(message(r)).toBe('GPU memory needs a Python kernel; R kernels are not supported');
    // Status changes of an unsupported kernel change nothing.
    expect(next(r, { type: 'kernel-status', status: 'restarting' })).toBe(r);
  });

  it('shows the install command when the shim is missing', () => {
    const missing = run([
      ...toLive.slice(0, 3),
      { type: 'bootstrap-missing', detail: "ModuleNotFoundError: No module named 'gpumem_kernel'" }
    ]);
    expect(missing.name).toBe('not-installed');
    const m = describeState(missing, untranslated);
    expect(m.command).toBe(INSTALL_COMMAND);
    expect(m.text).toBe(
      "gpumem_kernel is not installed in this kernel's environment: run %pip install jupyterlab-gpumem in the notebook, then restart the kernel"
    );
  });

  it('asks for %load_ext when autoload is off', () => {
    const off = run([...toLive.slice(0, 3), { type: 'bootstrap-off' }]);
    expect(off.name).toBe('autoload-off');
    expect(describeState(off, untranslated).command).toBe(LOAD_COMMAND);
    expect(message(off)).toContain('%load_ext gpumem_kernel');
  });

  it('refuses another protocol at bootstrap or hello', () => {
    const boot = run([...toLive.slice(0, 3), { type: 'bootstrap-ok', version: '2.0.0', protocol: 2 }]);
    expect(boot).toMatchObject({ name: 'version-mismatch', kernelProtocol: 2, kernelVersion: '2.0.0' });
    expect(message(boot)).toContain('The kernel speaks protocol v2, this extension speaks v1');
    expect(message(boot)).toContain("JupyterLab's environment");
    const hello = run([
      ...toLive.slice(0, 4),
      { type: 'hello', protocol: 0, version: '0.0.1', interval: 1, now: T0 }
    ]);
    expect(hello.name).toBe('version-mismatch');
    expect(message(hello)).toContain("pip install -U jupyterlab-gpumem in the kernel's environment");
  });

  it('goes stale after 3 intervals without a sample, then live again', () => {
    const live = run(toLive); // last sample at T0 + 100, interval 1 s
    expect(staleAfterMs(1)).toBe(3000);
    expect(next(live, { type: 'tick', now: T0 + 100 + 2900 }).name).toBe('live');
    const stale = next(live, { type: 'tick', now: T0 + 100 + 3100 });
    expect(stale.name).toBe('stale');
    expect(message(stale)).toContain('Kernel not responding');
    expect(stale.lastSampleAt).toBe(T0 + 100);
    const back = next(stale, { type: 'sample', now: T0 + 8000 });
    expect(back.name).toBe('live');
    expect(back.lastSampleAt).toBe(T0 + 8000);
  });

  it('scales the stale delay with the interval (with a floor)', () => {
    expect(staleAfterMs(5)).toBe(15000);
    expect(staleAfterMs(0.1)).toBe(1500);
    const slow = run([...toLive, { type: 'interval', interval: 5 }]);
    expect(next(slow, { type: 'tick', now: T0 + 100 + 10000 }).name).toBe('live');
    expect(next(slow, { type: 'tick', now: T0 + 100 + 16000 }).name).toBe('stale');
  });

  it('shows a dead kernel, and recovers on restart', () => {
    const dead = next(run(toLive), { type: 'kernel-status', status: 'dead' });
    expect(dead.name).toBe('dead');
    expect(message(dead)).toBe('The kernel died; restart it');
    expect(next(dead, { type: 'tick', now: T0 + 99999 })).toBe(dead);
    expect(next(dead, { type: 'sample', now: T0 })).toBe(dead);
    const restarting = next(dead, { type: 'kernel-status', status: 'restarting' });
    expect(restarting.phase).toBe('restarting');
  });

  it('reports errors in one line and recovers on the next valid sample', () => {
    const live = run(toLive);
    const bad = next(live, { type: 'protocol-problem', message: 'sample.seq: expected an integer' });
    expect(bad.name).toBe('error');
    expect(message(bad)).toBe('Error: sample.seq: expected an integer');
    expect(next(bad, { type: 'sample', now: T0 + 2000 }).name).toBe('live');
    const failed = run([...toLive.slice(0, 3), { type: 'bootstrap-failed', message: 'boom' }]);
    expect(message(failed)).toBe('Error: boom');
  });

  it('reports a comm closed by the kernel', () => {
    const closed = next(run(toLive), { type: 'comm-closed' });
    expect(closed).toMatchObject({ name: 'error', closedByKernel: true });
    expect(message(closed)).toContain('closed the GPU memory channel');
    // Not while restarting: JupyterLab drops the comm then.
    const restarting = next(run(toLive), { type: 'kernel-status', status: 'restarting' });
    expect(next(restarting, { type: 'comm-closed' })).toBe(restarting);
  });

  it('has a message for every state', () => {
    const names = [
      'no-kernel',
      'unsupported',
      'waiting',
      'not-installed',
      'autoload-off',
      'version-mismatch',
      'live',
      'stale',
      'dead',
      'error'
    ] as const;
    for (const name of names) {
      expect(message({ ...INITIAL_STATE, name }).length).toBeGreaterThan(3);
    }
  });
});
