import { untranslated } from '../../ui/i18n';
import {
  type BridgeEvent,
  describeKernelEnd,
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
  { type: 'kernel-status', status: 'idle', now: T0 },
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
    expect(next(live, { type: 'kernel-status', status: 'busy', now: T0 })).toBe(live);
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
    const restarting = next(run(toLive), { type: 'kernel-status', status: 'restarting', now: T0 });
    expect(restarting).toMatchObject({ name: 'waiting', phase: 'restarting', lastSampleAt: null });
    expect(message(restarting)).toBe('Kernel restarting…');
    // A sample from the old comm must not bring it back to live.
    expect(next(restarting, { type: 'sample', now: T0 + 5000 })).toBe(restarting);
    const again = run(
      [
        { type: 'kernel-status', status: 'starting', now: T0 },
        { type: 'kernel-status', status: 'idle', now: T0 },
        { type: 'language', name: 'python' },
        { type: 'bootstrap-ok', version: '0.1.0', protocol: 1 },
        { type: 'hello', protocol: 1, version: '0.1.0', interval: 1, now: T0 + 9000 }
      ],
      restarting
    );
    expect(again.name).toBe('live');
    const auto = next(run(toLive), { type: 'kernel-status', status: 'autorestarting', now: T0 });
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
    expect(next(r, { type: 'kernel-status', status: 'restarting', now: T0 })).toBe(r);
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
    const dead = next(run(toLive), { type: 'kernel-status', status: 'dead', now: T0 });
    expect(dead.name).toBe('dead');
    expect(message(dead)).toBe(
      'The kernel died and the server did not restart it: restart it (Kernel › Restart Kernel…) to see its GPU memory again'
    );
    expect(dead.lastEnd).toEqual({ cause: 'died', restartedByServer: false, at: T0 });
    expect(next(dead, { type: 'tick', now: T0 + 99999 })).toBe(dead);
    expect(next(dead, { type: 'sample', now: T0 })).toBe(dead);
    const restarting = next(dead, { type: 'kernel-status', status: 'restarting', now: T0 });
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
    const restarting = next(run(toLive), { type: 'kernel-status', status: 'restarting', now: T0 });
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

describe('how the kernel ended', () => {
  const at = (ms: number): string => `t+${ms - T0}`;
  const backToLive: BridgeEvent[] = [
    { type: 'kernel-status', status: 'idle', now: T0 + 4000 },
    { type: 'language', name: 'python' },
    { type: 'bootstrap-ok', version: '0.1.0', protocol: 1 },
    { type: 'hello', protocol: 1, version: '0.1.0', interval: 1, now: T0 + 5000 }
  ];

  it('says the kernel died and the server restarted it (kill -9), not only "restarting"', () => {
    // JupyterLab reports the server's restart of a dead process as 'restarting', then 'autorestarting'.
    const died = run(
      [
        { type: 'kernel-status', status: 'restarting', now: T0 + 1000 },
        { type: 'kernel-status', status: 'autorestarting', now: T0 + 1001 }
      ],
      run(toLive)
    );
    expect(died).toMatchObject({ name: 'waiting', phase: 'restarting' });
    expect(died.lastEnd).toEqual({ cause: 'died', restartedByServer: true, at: T0 + 1000 });
    expect(message(died)).toContain('The kernel died');
    expect(message(died)).toContain('the server is restarting it');
    expect(describeKernelEnd(died, untranslated, at)).toBeNull(); // the state's own message says it

    const live = run(backToLive, died);
    expect(live.name).toBe('live');
    expect(describeKernelEnd(live, untranslated, at)).toBe(
      'The kernel died at t+1000 and the server restarted it: the variables and GPU memory of the old process are gone.'
    );
  });

  it('keeps "died" through the new process’s own late "starting" (one episode until its hello)', () => {
    // The order JupyterLab 4.4 reported after kill -9 in a real browser.
    const events: BridgeEvent[] = [
      { type: 'kernel-status', status: 'restarting', now: T0 + 1000 },
      { type: 'kernel-status', status: 'autorestarting', now: T0 + 1001 },
      { type: 'kernel-status', status: 'unknown', now: T0 + 1002 },
      { type: 'kernel-status', status: 'busy', now: T0 + 2200 },
      { type: 'language', name: 'python' }, // our reconnect began
      { type: 'kernel-status', status: 'starting', now: T0 + 2250 },
      ...backToLive
    ];
    const live = run(events, run(toLive));
    expect(live).toMatchObject({ name: 'live', endPending: false });
    expect(live.lastEnd).toEqual({ cause: 'died', restartedByServer: true, at: T0 + 1000 });
    // After that hello, a 'starting' is another restart (another client's).
    const again = next(live, { type: 'kernel-status', status: 'starting', now: T0 + 9000 });
    expect(again.lastEnd).toEqual({ cause: 'restarted', restartedByServer: false, at: T0 + 9000 });
  });

  it('says a restart someone asked for is a restart', () => {
    const restarted = next(run(toLive), { type: 'kernel-status', status: 'restarting', now: T0 + 2000 });
    expect(restarted.lastEnd).toEqual({ cause: 'restarted', restartedByServer: false, at: T0 + 2000 });
    expect(message(restarted)).toBe('Kernel restarting…');
    expect(describeKernelEnd(run(backToLive, restarted), untranslated, at)).toBe(
      'The kernel was restarted at t+2000.'
    );
    // Another client's restart: JupyterLab reports only 'starting'.
    const other = next(run(toLive), { type: 'kernel-status', status: 'starting', now: T0 + 3000 });
    expect(other.lastEnd?.cause).toBe('restarted');
  });

  it('says a kernel the server did not restart is dead', () => {
    const dead = next(run(toLive), { type: 'kernel-status', status: 'dead', now: T0 + 1000 });
    expect(message(dead)).toContain('the server did not restart it');
    expect(describeKernelEnd(dead, untranslated, at)).toBeNull();
  });

  it('forgets it when the notebook gets another kernel', () => {
    const restarted = next(run(toLive), { type: 'kernel-status', status: 'restarting', now: T0 });
    const other = next(restarted, { type: 'kernel-changed', kernelName: 'Python 3 (gpu)', hasSession: true });
    expect(other.lastEnd).toBeNull();
    expect(INITIAL_STATE.lastEnd).toBeNull();
  });
});
