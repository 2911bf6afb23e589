import { Signal } from '@lumino/signaling';
import * as React from 'react';
import { act } from 'react';
import { createRoot, type Root } from 'react-dom/client';

import { untranslated } from '../../ui/i18n';
import { labelProcess } from '../../channel/sample';
import type { IHoldersMessage, ISample } from '../../wire/protocol';
import holdersJson from '../../__tests__/data/holders_cpu.json';
import { DEFAULT_SETTINGS, type IGpuMemSettings } from '../../settings';
import { type IBridgeState, INITIAL_STATE, type StateName } from '../../channel/state';
import { statusSummary } from '../statussummary';
import { TickStore } from '../../actions/ticks';
import type { IGpuMemActions, IGpuMemModel, ISessionActions } from '../../tokens';
import { GpuMemView } from '../view';
import * as fx from '../../__tests__/fixtures';

(globalThis as { IS_REACT_ACT_ENVIRONMENT?: boolean }).IS_REACT_ACT_ENVIRONMENT = true;

interface IStubOptions {
  state?: StateName;
  stateChanges?: Partial<IBridgeState>;
  latest?: ISample | null;
  history?: ISample[];
  settings?: Partial<IGpuMemSettings>;
  holders?: IHoldersMessage | null;
}

/** A model with fixed data. */
function stubModel(options: IStubOptions = {}): IGpuMemModel & { retried: number; loaded: number } {
  const sessions = new Map([
    [
      fx.OTHER_KERNEL_ID,
      { id: 'session-big', path: 'experiments/big.ipynb', type: 'notebook', name: 'big.ipynb' }
    ]
  ]);
  const stub = {
    state: { ...INITIAL_STATE, name: options.state ?? 'live', ...options.stateChanges },
    hello: fx.hello,
    latest: options.latest === undefined ? fx.sample() : options.latest,
    history: options.history ?? [],
    problems: [],
    holders: options.holders ?? null,
    settings: { ...DEFAULT_SETTINGS, ...options.settings },
    sessionContext: null,
    kernelLabel: 'Python 3 (ipykernel) · train.ipynb',
    kernelStatus: 'idle' as const,
    pendingRequests: 0,
    changed: new Signal<unknown, void>({}),
    stateChanged: new Signal<unknown, IBridgeState>({}),
    labelProcess: (p: Parameters<IGpuMemModel['labelProcess']>[0]) => labelProcess(p, sessions),
    request: () => Promise.reject(new Error('not in tests')),
    retried: 0,
    loaded: 0,
    retry(): void {
      stub.retried++;
    },
    loadNow(): void {
      stub.loaded++;
    }
  };
  return stub as unknown as IGpuMemModel & { retried: number; loaded: number };
}

let container: HTMLDivElement;
let root: Root;
let copied: string[];

function render(model: IGpuMemModel): HTMLDivElement {
  act(() => {
    root.render(<GpuMemView model={model} trans={untranslated} onCopy={t => copied.push(t)} />);
  });
  return container;
}

beforeEach(() => {
  container = document.createElement('div');
  document.body.appendChild(container);
  root = createRoot(container);
  copied = [];
});

afterEach(() => {
  act(() => root.unmount());
  container.remove();
});

describe('GpuMemView', () => {
  it('shows the blank state without a kernel', () => {
    const node = render(stubModel({ state: 'no-kernel', latest: null }));
    const state = node.querySelector('.jp-GpuMem-state[data-state="no-kernel"]');
    expect(state?.textContent).toContain('Open a notebook or console');
    expect(node.querySelector('.jp-GpuMem-updated')).toBeNull();
    expect(node.querySelector('.jp-GpuMem-device')).toBeNull();
  });

  it('shows devices, timeline and host memory when live', () => {
    const history = [
      fx.sample(40, 1763854998.12),
      fx.sample(41, 1763854999.12),
      fx.sample(42, 1763855000.12)
    ];
    const node = render(stubModel({ history }));
    expect(node.querySelector('.jp-GpuMem-state')).toBeNull();
    expect(node.querySelector('.jp-GpuMem-root')?.getAttribute('data-state')).toBe('live');
    expect(node.querySelector('.jp-GpuMem-updated')?.getAttribute('data-seq')).toBe('42');
    expect(node.querySelector('.jp-GpuMem-updated')?.textContent).toMatch(/^updated \d\d:\d\d:\d\d$/);

    const devices = node.querySelectorAll('section.jp-GpuMem-device');
    expect(devices).toHaveLength(2);
    expect(devices[0].querySelector('h3')?.textContent).toBe(
      'cuda:0 · NVIDIA GeForce RTX 4080 SUPER · 16.0 GiB'
    );
    expect(devices[1].querySelector('h3')?.textContent).toBe(
      'not visible to this kernel (NVML 1) · NVIDIA GeForce RTX 4080 SUPER · 16.0 GiB'
    );
    const segments = devices[0].querySelectorAll('.jp-GpuMem-bar .jp-GpuMem-seg');
    expect([...segments].map(s => s.className.replace('jp-GpuMem-seg jp-GpuMem-seg-', ''))).toEqual([
      'allocated',
      'cached',
      'context',
      'others',
      'free'
    ]);
    expect(segments[0].getAttribute('title')).toBe('allocated (tensors): 4.00 GiB (25.0%)');
    expect(devices[0].querySelector('.jp-GpuMem-used')?.textContent).toBe('Used 12.0 / 16.0 GiB (75.0%)');
    expect(devices[0].querySelector('.jp-GpuMem-warning')).toBeNull();
    expect(devices[0].querySelector('.jp-GpuMem-allocator')?.textContent).toContain('Peak allocated5.00 GiB');

    const rows = [...devices[0].querySelectorAll('.jp-GpuMem-processes tbody tr')].map(r => [
      r.querySelector('.jp-GpuMem-procLabel')?.textContent,
      r.querySelector('.jp-GpuMem-procMeta')?.textContent,
      r.querySelector('td.jp-GpuMem-num')?.textContent
    ]);
    expect(rows).toEqual([
      ['this kernel', 'PID 1234 · python', '6.50 GiB'],
      ['notebook: experiments/big.ipynb', 'PID 2345 · python', '4.00 GiB'],
      ['external', 'PID 3456 · train.py', '1.50 GiB'],
      ['external', 'PID 4567 · not visible here', 'n/a']
    ]);

    const timeline = node.querySelector('.jp-GpuMem-sampleChart');
    expect(timeline?.querySelectorAll('polyline.jp-GpuMem-line-used')).toHaveLength(1);
    expect(timeline?.querySelectorAll('polyline.jp-GpuMem-line-peak')).toHaveLength(1);
    expect(timeline?.textContent).toContain('Last 10 min · cuda:0');
    expect(timeline?.textContent).toContain('16.0 GiB');

    const host = node.querySelector('section.jp-GpuMem-host');
    expect(host?.textContent).toContain('Host memory');
    expect(host?.textContent).toContain('2 processes, 1.00 GiB RSS');
    expect(host?.textContent).toContain('40.0 / 64.0 GiB available');
    expect(host?.textContent).not.toContain('Container limit');
  });

  it('warns from the threshold', () => {
    const s = fx.sample();
    s.gpu.devices[0].used = Math.round(fx.DEVICE_TOTAL * 0.9);
    const node = render(stubModel({ latest: s }));
    const warning = node.querySelector('.jp-GpuMem-device .jp-GpuMem-warning');
    expect(warning?.textContent).toBe('90% of this GPU’s memory is in use (warning from 85%)');
    expect(warning?.classList.contains('jp-GpuMem-level-warn')).toBe(true);
    s.gpu.devices[0].used = s.gpu.devices[0].total;
    const critical = render(stubModel({ latest: s })).querySelector('.jp-GpuMem-warning');
    expect(critical?.classList.contains('jp-GpuMem-level-critical')).toBe(true);
  });

  it('says when no GPU is visible, and still shows host memory', () => {
    const node = render(stubModel({ latest: fx.noGpuSample() }));
    expect(node.querySelector('.jp-GpuMem-nogpu')?.textContent).toBe(
      'No NVIDIA GPU visible to this kernel: NVIDIA driver library (libnvidia-ml.so.1) not found'
    );
    expect(node.querySelector('.jp-GpuMem-device')).toBeNull();
    expect(node.querySelector('.jp-GpuMem-sampleChart')).toBeNull();
    const host = node.querySelector('.jp-GpuMem-host');
    expect(host?.textContent).toContain('Container limit');
    expect(host?.textContent).toContain('2.00 / 8.00 GiB (25.0%)');
  });

  it('offers the install command to copy', async () => {
    const model = stubModel({ state: 'not-installed', latest: null });
    const node = render(model);
    const state = node.querySelector('.jp-GpuMem-state[data-state="not-installed"]');
    expect(state?.querySelector('code')?.textContent).toBe('%pip install jupyterlab-gpumem');
    await act(async () => (state?.querySelector('.jp-GpuMem-copy') as HTMLButtonElement).click());
    expect(copied).toEqual(['%pip install jupyterlab-gpumem']);
    const retry = [...node.querySelectorAll('button')].find(b => b.textContent === 'Retry');
    act(() => retry?.click());
    expect(model.retried).toBe(1);
  });

  it('offers to load the shim when autoload is off', () => {
    const model = stubModel({ state: 'autoload-off', latest: null });
    const node = render(model);
    const load = [...node.querySelectorAll('button')].find(b => b.textContent === 'Load now');
    act(() => load?.click());
    expect(model.loaded).toBe(1);
  });

  it('keeps the last numbers, dimmed, when the kernel stops answering', () => {
    const node = render(stubModel({ state: 'stale' }));
    expect(node.querySelector('.jp-GpuMem-state[data-state="stale"]')?.textContent).toContain(
      'Kernel not responding'
    );
    expect(node.querySelector('.jp-GpuMem-data.jp-mod-stale')).not.toBeNull();
    expect(node.querySelector('.jp-GpuMem-updated[data-seq="42"]')).not.toBeNull();
  });

  it('hides old numbers while waiting for a restarted kernel', () => {
    const node = render(stubModel({ state: 'waiting', stateChanges: { phase: 'restarting' } }));
    expect(node.querySelector('.jp-GpuMem-state')?.textContent).toContain('Kernel restarting');
    expect(node.querySelector('.jp-GpuMem-device')).toBeNull();
  });

  it('says the kernel died while the server restarts it, not only "connecting"', () => {
    const died = { cause: 'died' as const, restartedByServer: true, at: Date.UTC(2025, 0, 1, 12, 3, 4) };
    let node = render(stubModel({ state: 'waiting', stateChanges: { phase: 'restarting', lastEnd: died } }));
    expect(node.querySelector('.jp-GpuMem-badge')?.textContent).toBe('kernel died');
    expect(node.querySelector('.jp-GpuMem-state')?.textContent).toContain(
      'The kernel died (its process ended without being asked to'
    );
    expect(node.querySelector('.jp-GpuMem-kernelEnd')).toBeNull(); // said once, by the state message

    // Back to live: one line keeps saying what happened, with the time.
    node = render(stubModel({ stateChanges: { lastEnd: died } }));
    const end = node.querySelector('.jp-GpuMem-kernelEnd');
    expect(end?.getAttribute('role')).toBe('status');
    expect(end?.getAttribute('data-cause')).toBe('died');
    expect(end?.getAttribute('data-restarted-by-server')).toBe('yes');
    expect(end?.textContent).toMatch(
      /^The kernel died at \d\d:\d\d:\d\d and the server restarted it: the variables and GPU memory of the old process are gone\.$/
    );
  });

  it('tells a restart someone asked for from a death', () => {
    const restarted = { cause: 'restarted' as const, restartedByServer: false, at: Date.now() };
    let node = render(
      stubModel({ state: 'waiting', stateChanges: { phase: 'restarting', lastEnd: restarted } })
    );
    expect(node.querySelector('.jp-GpuMem-badge')?.textContent).toBe('restarting');
    node = render(stubModel({ stateChanges: { lastEnd: restarted } }));
    expect(node.querySelector('.jp-GpuMem-kernelEnd')?.textContent).toMatch(/^The kernel was restarted at /);
    node = render(stubModel({ state: 'dead', latest: null }));
    expect(node.querySelector('.jp-GpuMem-badge')?.textContent).toBe('kernel dead');
    expect(node.querySelector('.jp-GpuMem-state')?.textContent).toContain('the server did not restart it');
  });

  it('says "Copied" after copying a command', async () => {
    const node = render(stubModel({ state: 'autoload-off', latest: null }));
    const copy = node.querySelector<HTMLButtonElement>('.jp-GpuMem-copy')!;
    await act(async () => copy.click());
    expect(copied).toEqual(['%load_ext gpumem_kernel']);
    expect(copy.textContent).toBe('Copied');
    expect(node.querySelector('.jp-GpuMem-copyStatus')?.textContent).toBe('Copied to the clipboard');
  });

  it('copes with devices NVML could not read and with MIG slices', () => {
    const s = fx.sample();
    s.gpu.devices = [fx.device0(), fx.migSlice(), fx.unreadableDevice()];
    const node = render(stubModel({ latest: s, history: [s] }));
    const titles = [...node.querySelectorAll('.jp-GpuMem-device h3')].map(h => h.textContent);
    expect(titles).toEqual([
      'cuda:0 · NVIDIA GeForce RTX 4080 SUPER · 16.0 GiB',
      'cuda:0 · NVIDIA A100-SXM4-80GB MIG 3g.40gb · 40.0 GiB · MIG',
      'not visible to this kernel (NVML 2) · unknown GPU'
    ]);
    const unreadable = node.querySelectorAll('.jp-GpuMem-device')[2];
    expect(unreadable.querySelector('.jp-GpuMem-used')?.textContent).toBe('Used n/a / n/a (n/a)');
    expect(unreadable.querySelectorAll('.jp-GpuMem-bar .jp-GpuMem-seg')).toHaveLength(0);
  });

  it('shows the power draw against its limit beside utilisation, or why it is not measured', () => {
    const s = fx.sample();
    const pascal = { ...fx.device0(), nvml_index: 1, power_limit_mw: null, energy_mj: null };
    const mig = { ...fx.migSlice(), power_mw: null, power_limit_mw: null, energy_mj: null };
    mig.power_note = 'power and energy are the whole GPU’s: NVML does not report them per MIG slice';
    const old = fx.device1(); // a kernel from before power: no line at all
    s.gpu.devices = [fx.device0(), pascal, mig, old];
    const node = render(stubModel({ latest: s, history: [s] }));
    const facts = [...node.querySelectorAll('.jp-GpuMem-device .jp-GpuMem-facts')].map(list =>
      [...list.querySelectorAll('.jp-GpuMem-fact')].map(f => [
        f.querySelector('dt')?.textContent,
        f.querySelector('dd')?.textContent,
        f.querySelector('dd')?.getAttribute('title') ?? null
      ])
    );
    expect(facts[0].slice(0, 3)).toEqual([
      ['GPU utilisation', '37%', null],
      ['Memory utilisation', '12%', null],
      ['Power', '285 W of 320 W (89%)', null]
    ]);
    expect(facts[1][2]).toEqual(['Power', '285 W', null]);
    expect(facts[2].find(f => f[0] === 'Power')).toEqual(['Power', 'n/a', mig.power_note]);
    expect(facts[3].map(f => f[0])).not.toContain('Power');
  });

  it('renders kernel data as text, never as HTML', () => {
    const s = fx.sample();
    s.gpu.devices[0].processes[2].name = '<img src=x onerror="alert(1)">';
    s.gpu.devices[0].name = '<b>GPU</b>';
    const node = render(stubModel({ latest: s }));
    expect(node.querySelector('img')).toBeNull();
    expect(node.querySelector('.jp-GpuMem-device b')).toBeNull();
    expect(node.textContent).toContain('<img src=x onerror="alert(1)">');
  });
});

describe('Held by', () => {
  const message = (): IHoldersMessage => JSON.parse(JSON.stringify(holdersJson)) as IHoldersMessage;
  const texts = (node: HTMLElement, selector: string): string[] =>
    [...node.querySelectorAll(selector)].map(e => e.textContent ?? '');
  const rows = (node: HTMLElement): string[][] =>
    [...node.querySelectorAll('.jp-GpuMem-heldBy tbody tr')].map(tr =>
      [...tr.querySelectorAll('.jp-GpuMem-procLabel, .jp-GpuMem-procMeta, .jp-GpuMem-num')].map(
        e => e.textContent ?? ''
      )
    );

  it('lists the variables holding the device, what IPython holds and the remainder no variable reaches', () => {
    const node = render(stubModel({ holders: message(), settings: { units: 'MiB' } }));
    const device = node.querySelector('.jp-GpuMem-device[data-cuda-index="0"]');
    expect(device?.querySelector('.jp-GpuMem-heldBy th')?.textContent).toBe('Held by (after cell [2])');
    expect(rows(node)).toEqual([
      ['losses', 'list of 40 tensors with grad history', '10 MiB'],
      ['opt', 'Adam, state for 4 parameters; shared with `model`', '2.0 MiB'],
      ['model', 'Sequential, 267.8K params, gradients; shared with `opt`', '2.0 MiB'],
      [
        'Out',
        "IPython's output cache (Out[2], _, _2): `del` of a variable does not free these; %gpumem clear does",
        '512 KiB'
      ],
      ['w', 'tensor float32 [256×256] on cpu', '256 KiB'],
      ['(2 more)', '`%gpumem holders` lists them all', '129 KiB'],
      [
        'not reachable from your variables',
        "autograd graphs of tensors you kept, closures, a library's caches",
        '33 MiB'
      ]
    ]);
    expect(texts(node, '.jp-GpuMem-heldByNote')).toEqual([
      '`losses` keeps autograd graphs: their saved tensors are in the remainder (store loss.item() or t.detach() instead)'
    ]);
    // only the device the message names: the hidden device and the other GPU show nothing
    expect(node.querySelectorAll('.jp-GpuMem-heldBy')).toHaveLength(1);
  });

  it('says when the walk was skipped over its time budget, on the devices this kernel uses', () => {
    const skipped: IHoldersMessage = {
      ...message(),
      skipped: true,
      devices: [],
      history_hint: null,
      note: 'skipped: looking through your variables took over 50 ms (120,000 objects looked at); `%gpumem holders` looks without the per-cell limit'
    };
    const node = render(stubModel({ holders: skipped }));
    expect(node.querySelector('.jp-GpuMem-heldBy')).toBeNull();
    expect(texts(node, '.jp-GpuMem-heldBySkipped')).toEqual([`Held by (after cell [2]): ${skipped.note}`]);
  });

  it('shows nothing before a cell ends with CUDA in use, and kernel strings as text', () => {
    expect(render(stubModel({ holders: null })).querySelector('.jp-GpuMem-heldBy')).toBeNull();
    const hostile = message();
    hostile.devices[0].entries[0].name = '<img src=x onerror=alert(1)>';
    const node = render(stubModel({ holders: hostile }));
    expect(rows(node)[0][0]).toBe('<img src=x onerror=alert(1)>');
    expect(node.querySelector('.jp-GpuMem-heldBy img')).toBeNull();
  });
});

describe('who holds my GPU', () => {
  it('offers "Shut down kernel" for the other kernels of this server only', () => {
    const shutDown: string[] = [];
    const actions: IGpuMemActions = {
      changed: new Signal<IGpuMemActions, void>({} as IGpuMemActions),
      sessionChanged: new Signal<IGpuMemActions, ISessionActions>({} as IGpuMemActions),
      current: null,
      ticks: new TickStore(null),
      forWidget: () => null,
      labelKernel: () => null,
      canShutDownKernel: id => id === fx.OTHER_KERNEL_ID,
      shutDownKernel: async id => {
        shutDown.push(id);
        return true;
      }
    };
    act(() => {
      root.render(
        <GpuMemView model={stubModel()} trans={untranslated} onCopy={() => undefined} actions={actions} />
      );
    });
    const rows = [...container.querySelectorAll('.jp-GpuMem-device')[0].querySelectorAll('tbody tr')];
    expect(rows.map(r => r.querySelector('.jp-GpuMem-shutdown') !== null)).toEqual([
      false,
      true,
      false,
      false
    ]);
    expect(rows[2].textContent).toBe('externalPID 3456 · train.py1.50 GiB');
    act(() => (rows[1].querySelector('.jp-GpuMem-shutdown') as HTMLButtonElement).click());
    expect(shutDown).toEqual([fx.OTHER_KERNEL_ID]);
  });

  it('shows no button without the actions plugin', () => {
    const node = render(stubModel());
    expect(node.querySelector('.jp-GpuMem-shutdown')).toBeNull();
  });
});

describe('statusSummary', () => {
  it('shows the device this kernel uses', () => {
    const summary = statusSummary(stubModel(), untranslated);
    expect(summary).toMatchObject({ visible: true, text: 'GPU 12.0 / 16.0 GiB', level: 'ok', stale: false });
    expect(summary.title).toContain('cuda:0 · NVIDIA GeForce RTX 4080 SUPER');
    expect(summary.title).toContain('This kernel: 6.50 GiB');
  });

  it('colours by threshold', () => {
    const s = fx.sample();
    s.gpu.devices[0].used = Math.round(fx.DEVICE_TOTAL * 0.96);
    expect(statusSummary(stubModel({ latest: s }), untranslated).level).toBe('critical');
    s.gpu.devices[0].used = Math.round(fx.DEVICE_TOTAL * 0.86);
    expect(statusSummary(stubModel({ latest: s }), untranslated).level).toBe('warn');
  });

  it('says "GPU: none" without a GPU and hides without a kernel', () => {
    expect(statusSummary(stubModel({ latest: fx.noGpuSample() }), untranslated).text).toMatch(
      /^GPU: none · /
    );
    expect(statusSummary(stubModel({ state: 'no-kernel', latest: null }), untranslated).visible).toBe(false);
    expect(statusSummary(stubModel({ settings: { showStatusBar: false } }), untranslated).visible).toBe(
      false
    );
    expect(statusSummary(stubModel({ state: 'not-installed', latest: null }), untranslated).text).toBe(
      'GPU: –'
    );
  });

  it("without a GPU shows the kernel's RAM against the container's limit, else the machine's memory", () => {
    const s = fx.noGpuSample();
    s.host = { ...s.host, rss: 1.2 * fx.GIB, total: 16 * fx.GIB, container_limit: 8 * fx.GIB };
    const inContainer = statusSummary(stubModel({ latest: s }), untranslated);
    expect(inContainer.text).toBe('GPU: none · RAM 1.2 / 8.0 GiB');
    expect(inContainer.title).toContain("Kernel RSS 1.20 GiB of the container's 8.00 GiB memory limit");
    expect(inContainer.title).toContain('NVIDIA driver library (libnvidia-ml.so.1) not found');
    expect(inContainer.level).toBe('ok');
    s.host = { ...s.host, container_limit: null };
    expect(statusSummary(stubModel({ latest: s }), untranslated).text).toBe('GPU: none · RAM 1.2 / 16.0 GiB');
    s.host = { ...s.host, container_limit: 64 * fx.GIB }; // a limit above the machine's memory does not bind
    expect(statusSummary(stubModel({ latest: s }), untranslated).text).toBe('GPU: none · RAM 1.2 / 16.0 GiB');
    s.host = { ...s.host, rss: 15.5 * fx.GIB };
    expect(statusSummary(stubModel({ latest: s }), untranslated).level).toBe('critical');
  });

  it('uses the chosen unit', () => {
    expect(statusSummary(stubModel({ settings: { units: 'MiB' } }), untranslated).text).toBe(
      'GPU 12288 / 16376 MiB'
    );
    expect(statusSummary(stubModel({ settings: { units: 'GB' } }), untranslated).text).toBe(
      'GPU 12.9 / 17.2 GB'
    );
  });
});
