import * as React from 'react';
import { act } from 'react';
import { createRoot, type Root } from 'react-dom/client';

import { MessageRouter, NO_GROWTH } from '../../channel/routing';
import { PendingRequests } from '../../channel/requests';
import { untranslated } from '../../ui/i18n';
import type { IGrowth, IRerunGrowth, IRunningGrowth } from '../../wire/protocol';
import type { IGrowthState } from '../../tokens';
import { GrowthSection } from '../growth';

(globalThis as { IS_REACT_ACT_ENVIRONMENT?: boolean }).IS_REACT_ACT_ENVIRONMENT = true;

const MiB = 1 << 20;

const RUNNING: IRunningGrowth = {
  device: 'cuda:0',
  cell: 12,
  rate: 30 * MiB,
  allocated: 2048 * MiB,
  since: 1763855000,
  seconds: 95,
  samples: 96,
  full_in: 14 * 60
};

const RERUN: IRerunGrowth = {
  cell: 12,
  cell_id: 'c-1',
  device: 'cuda:0',
  step: 512 * MiB,
  reserved_step: 512 * MiB,
  runs: 3,
  runs_left: 7,
  holders: [{ name: 'losses', bytes: 4, tensors: 1, description: 'list of 4 tensors with grad history' }],
  pattern: 'loss_with_graph',
  fix: 'append `loss.item()` (a Python number) to `losses`, not the <tensor>'
};

function growth(time: number, running: IRunningGrowth | null, rerun: IRerunGrowth | null): IGrowth {
  return { type: 'growth', time, running, rerun };
}

describe('growth messages', () => {
  function router(): { router: MessageRouter; problems: string[] } {
    const problems: string[] = [];
    const made = new MessageRouter({
      historySeconds: 600,
      requests: new PendingRequests({ changed: () => undefined, configured: () => undefined } as never),
      apply: event => {
        if (event.type === 'protocol-problem') {
          problems.push(event.message);
        }
      },
      interval: () => 1,
      greeted: () => undefined,
      sampled: () => undefined,
      stop: () => undefined,
      changed: () => undefined
    });
    return { router: made, problems };
  }

  it('keeps the trend while claimed and a notice until the next one or a new kernel process', () => {
    const { router: r, problems } = router();
    r.route(growth(1, RUNNING, null));
    expect(r.growth).toEqual({ running: RUNNING, rerun: null, rerunTime: null });
    r.route(growth(2, null, RERUN));
    r.route(growth(3, null, null)); // a trend ended: the notice stays
    expect(r.growth).toEqual({ running: null, rerun: RERUN, rerunTime: 2 });
    const warn = jest.spyOn(console, 'warn').mockImplementation(() => undefined);
    r.route({ ...growth(4, null, RERUN), rerun: { ...RERUN, runs: 2 } }); // fewer than 3 runs: refused
    warn.mockRestore();
    expect(problems).toEqual([expect.stringContaining('runs')]);
    expect(r.growth.rerunTime).toBe(2);
    r.forget();
    expect(r.growth).toBe(NO_GROWTH);
  });
});

describe('GrowthSection', () => {
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

  function render(state: IGrowthState): HTMLDivElement {
    act(() => root.render(<GrowthSection growth={state} unit="MiB" trans={untranslated} />));
    return container;
  }

  it('says nothing without growth', () => {
    expect(render(NO_GROWTH).textContent).toBe('');
  });

  it('shows the running trend and the re-run notice with the holders that grew and the fix, escaped', () => {
    const node = render({ running: RUNNING, rerun: RERUN, rerunTime: 2 });
    expect(node.querySelector('.jp-GpuMem-growthRunning')?.textContent).toBe(
      'allocated grows 30 MiB/min on cuda:0 in this cell; full in ~14 min'
    );
    const notice = node.querySelector('.jp-GpuMem-growth');
    expect(notice?.getAttribute('data-pattern')).toBe('loss_with_graph');
    expect(notice?.querySelector('h3')?.textContent).toBe(
      'Cell [12] leaves +512 MiB allocated on cuda:0 after each run (3 runs); at this rate the GPU is full after 7 more runs'
    );
    expect(notice?.querySelector('li')?.textContent).toBe(
      'losses +1 tensor, +4 B (now list of 4 tensors with grad history)'
    );
    expect(notice?.querySelector('.jp-GpuMem-growthFix')?.textContent).toBe(`Fix: ${RERUN.fix}`);
    expect(notice?.innerHTML).toContain('&lt;tensor&gt;');
  });

  it("words a notice on the host as the kernel's RSS and host memory, not an allocator on a GPU", () => {
    const host: IRerunGrowth = { ...RERUN, device: 'host', step: 16 * MiB, reserved_step: 0, runs_left: 9 };
    const heading = render({ running: null, rerun: host, rerunTime: 2 }).querySelector(
      '.jp-GpuMem-growth h3'
    );
    expect(heading?.textContent).toBe(
      "Cell [12] grows this kernel's RSS by +16 MiB each run (3 runs); at this rate host memory is full after 9 more runs"
    );
    expect(heading?.textContent).not.toMatch(/GPU|allocated/);
  });

  it('hides a dismissed notice until the kernel sends another', () => {
    const node = render({ running: null, rerun: RERUN, rerunTime: 2 });
    act(() => (node.querySelector('.jp-GpuMem-growthDismiss') as HTMLButtonElement).click());
    expect(node.querySelector('.jp-GpuMem-growth')).toBeNull();
    render({ running: null, rerun: { ...RERUN, runs: 4, runs_left: 0 }, rerunTime: 3 });
    expect(node.querySelector('.jp-GpuMem-growth h3')?.textContent).toBe(
      'Cell [12] leaves +512 MiB allocated on cuda:0 after each run (4 runs); at this rate the GPU is full at the next run'
    );
  });
});
