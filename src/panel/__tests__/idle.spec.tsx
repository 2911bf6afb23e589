import { Signal } from '@lumino/signaling';
import * as React from 'react';
import { act } from 'react';
import { createRoot, type Root } from 'react-dom/client';

import { untranslated } from '../../ui/i18n';
import { TickStore } from '../../actions/ticks';
import type { IGpuMemActions, ISessionActions } from '../../tokens';
import { IdleHoldersSection } from '../idle';
import { idleHolders, IdleHoldersModel, type IServerKernel, parseServerKernels } from '../idleholders';
import { GpuMemView } from '../view';
import { DEFAULT_SETTINGS } from '../../settings';
import { INITIAL_STATE } from '../../channel/state';

(globalThis as { IS_REACT_ACT_ENVIRONMENT?: boolean }).IS_REACT_ACT_ENVIRONMENT = true;

const GiB = 2 ** 30;

function kernel(id: string, idleMinutes: number, gpuGiB: number, path = `${id}.ipynb`): IServerKernel {
  return {
    id,
    name: 'python3',
    path,
    execution_state: 'idle',
    idle_seconds: idleMinutes * 60,
    gpu_bytes: gpuGiB * GiB
  };
}

/** As the server extension answers (gpumem_kernel/server/handlers.py), with a field the panel does not know. */
const SERVER_ANSWER = {
  time: 1800000000,
  nvml_available: true,
  reason: null,
  idle_minutes: 30,
  kernels: [
    { ...kernel('aaaaaaaa-1', 45, 3), last_activity: 1799997300 },
    { ...kernel('bbbbbbbb-2', 120, 0), last_activity: 1799992800 },
    { ...kernel('cccccccc-3', 90, 1, ''), last_activity: 1799994600 },
    { ...kernel('dddddddd-4', 5, 8), last_activity: 1799999700 },
    { id: 'broken' }
  ]
};

let container: HTMLDivElement;
let root: Root;

beforeEach(() => {
  container = document.createElement('div');
  document.body.appendChild(container);
  root = createRoot(container);
});

afterEach(() => {
  act(() => root.unmount());
  container.remove();
});

describe('idleHolders', () => {
  it('keeps kernels holding GPU memory idle past the setting, longest idle first', () => {
    const parsed = parseServerKernels(SERVER_ANSWER);
    expect(parsed?.kernels.map(k => k.id)).toEqual(['aaaaaaaa-1', 'bbbbbbbb-2', 'cccccccc-3', 'dddddddd-4']);
    expect(idleHolders(parsed!.kernels, 30).map(k => k.id)).toEqual(['cccccccc-3', 'aaaaaaaa-1']);
    expect(idleHolders(parsed!.kernels, 60).map(k => k.id)).toEqual(['cccccccc-3']);
    expect(idleHolders(parsed!.kernels, 1).map(k => k.id)).toEqual([
      'cccccccc-3',
      'aaaaaaaa-1',
      'dddddddd-4'
    ]);
  });

  it("refuses an answer that is not the extension's", () => {
    expect(parseServerKernels('<html>')).toBeNull();
    expect(parseServerKernels({ kernels: 'no' })).toBeNull();
  });
});

describe('IdleHoldersSection', () => {
  function render(element: JSX.Element): HTMLDivElement {
    act(() => root.render(element));
    return container;
  }

  it('lists each idle holder with its memory, idle time and "Shut down kernel" where the server has its session', () => {
    const shutDown: string[] = [];
    const node = render(
      <IdleHoldersSection
        kernels={parseServerKernels(SERVER_ANSWER)!.kernels}
        idleMinutes={30}
        unit="GiB"
        trans={untranslated}
        shutDown={{ can: id => id !== 'cccccccc-3', run: id => shutDown.push(id) }}
      />
    );
    expect(node.querySelector('h3')?.textContent).toBe(
      '2 kernels hold GPU memory, idle for more than 30 min'
    );
    const items = [...node.querySelectorAll('.jp-GpuMem-idleKernel')];
    expect(items.map(i => i.getAttribute('data-kernel-id'))).toEqual(['cccccccc-3', 'aaaaaaaa-1']);
    expect(items[0].textContent).toBe('kernel cccccccc1.00 GiB on the GPU · idle 2 h'); // 90 min, in the panel's one duration format
    expect(items[1].textContent).toContain('notebook: aaaaaaaa-1.ipynb3.00 GiB on the GPU · idle 45 min');
    expect(items[0].querySelector('.jp-GpuMem-shutdown')).toBeNull();
    act(() => (items[1].querySelector('.jp-GpuMem-shutdown') as HTMLButtonElement).click());
    expect(shutDown).toEqual(['aaaaaaaa-1']);
  });

  it('shows nothing while no kernel qualifies', () => {
    const props = { idleMinutes: 30, unit: 'GiB' as const, trans: untranslated };
    expect(render(<IdleHoldersSection kernels={[kernel('a', 10, 4)]} {...props} />).innerHTML).toBe('');
    expect(render(<IdleHoldersSection kernels={[kernel('a', 60, 0)]} {...props} />).innerHTML).toBe('');
  });
});

describe('the panel with idle GPU holders', () => {
  it('shows them without a kernel, uses the idleMinutes setting and reads the list again after a shut-down', async () => {
    const answers = [SERVER_ANSWER, { ...SERVER_ANSWER, kernels: [SERVER_ANSWER.kernels[0]] }];
    let reads = 0;
    const idle = new IdleHoldersModel({
      fetch: async () => parseServerKernels(answers[Math.min(reads++, 1)])!
    });
    await idle.refresh();
    const actions: IGpuMemActions = {
      changed: new Signal<IGpuMemActions, void>({} as IGpuMemActions),
      sessionChanged: new Signal<IGpuMemActions, ISessionActions>({} as IGpuMemActions),
      current: null,
      ticks: new TickStore(null),
      forWidget: () => null,
      labelKernel: () => null,
      canShutDownKernel: () => true,
      shutDownKernel: async () => true
    };
    const model = {
      state: { ...INITIAL_STATE, name: 'no-kernel' },
      hello: null,
      latest: null,
      history: [],
      problems: [],
      settings: { ...DEFAULT_SETTINGS, idleMinutes: 60 },
      kernelLabel: null,
      kernelStatus: null,
      pendingRequests: 0,
      changed: new Signal<unknown, void>({}),
      retry: () => undefined,
      loadNow: () => undefined
    };
    const view = (): JSX.Element => (
      <GpuMemView
        model={model as never}
        trans={untranslated}
        onCopy={() => undefined}
        actions={actions}
        idle={idle}
      />
    );
    act(() => root.render(view()));
    const ids = (): (string | null)[] =>
      [...container.querySelectorAll('.jp-GpuMem-idleKernel')].map(i => i.getAttribute('data-kernel-id'));
    expect(ids()).toEqual(['cccccccc-3']); // 60 min: the 45-min kernel is not listed yet
    await act(async () => {
      (container.querySelector('.jp-GpuMem-shutdown') as HTMLButtonElement).click();
      await new Promise(resolve => setTimeout(resolve, 0));
    });
    expect(reads).toBe(2);
    act(() => root.render(view()));
    expect(ids()).toEqual([]);
    idle.dispose();
  });

  it('polls while started and stops when hidden', () => {
    jest.useFakeTimers();
    let reads = 0;
    const idle = new IdleHoldersModel({
      fetch: async () => {
        reads++;
        return 'failed';
      },
      intervalMs: 1000
    });
    idle.start();
    idle.start();
    jest.advanceTimersByTime(3000);
    expect(reads).toBe(4);
    idle.stop();
    jest.advanceTimersByTime(3000);
    expect(reads).toBe(4);
    idle.dispose();
    jest.useRealTimers();
  });

  it('stops asking a server without the extension, and shows nothing', async () => {
    jest.useFakeTimers();
    let reads = 0;
    const idle = new IdleHoldersModel({
      fetch: async () => {
        reads++;
        return 'no-extension';
      },
      intervalMs: 1000
    });
    idle.start();
    await Promise.resolve();
    await Promise.resolve();
    jest.advanceTimersByTime(5000);
    expect(reads).toBe(1);
    expect(idle.problem).toBe('no-extension');
    expect(idle.kernels).toEqual([]);
    idle.dispose();
    jest.useRealTimers();
  });
});
