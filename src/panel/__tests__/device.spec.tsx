import * as React from 'react';
import { act } from 'react';
import { createRoot, type Root } from 'react-dom/client';

import { labelProcess } from '../../channel/sample';
import { DEFAULT_SETTINGS } from '../../settings';
import { untranslated } from '../../ui/i18n';
import type { IDevice, IGpuProcess } from '../../wire/protocol';
import { DeviceSection, type IProcessEnd, processMeta, rankText } from '../device';
import * as fx from '../../__tests__/fixtures';

(globalThis as { IS_REACT_ACT_ENVIRONMENT?: boolean }).IS_REACT_ACT_ENVIRONMENT = true;

describe('a device seen from a container', () => {
  let host: HTMLDivElement;
  let root: Root;

  beforeEach(() => {
    host = document.createElement('div');
    document.body.appendChild(host);
    root = createRoot(host);
  });

  afterEach(() => {
    act(() => root.unmount());
    host.remove();
  });

  const render = (device: IDevice, end: IProcessEnd | null = null): void => {
    act(() =>
      root.render(
        <DeviceSection
          device={device}
          settings={DEFAULT_SETTINGS}
          trans={untranslated}
          labelProcess={p => labelProcess(p, new Map())}
          end={end}
        />
      )
    );
  };
  const rows = (): Record<string, string> =>
    Object.fromEntries(
      Array.from(host.querySelectorAll('.jp-GpuMem-processes tbody tr')).map(tr => [
        tr.getAttribute('data-relation') ?? '',
        `${tr.querySelector('.jp-GpuMem-procLabel')?.textContent} | ${tr.querySelector('.jp-GpuMem-procMeta')?.textContent}`
      ])
    );

  it('labels this kernel by its host PID and the notebook’s process with its command line', () => {
    render(fx.containerDevice());
    expect(rows()).toEqual({
      this_kernel: 'this kernel | PID 57 (host PID 4000000) · not visible here',
      notebook: 'started from this notebook | PID 88 (host PID 4000200) · python train.py --epochs 3',
      external: 'external | PID 3900000 · not visible here'
    });
    expect(host.querySelector('.jp-GpuMem-seg-notebook')).not.toBeNull();
    expect(host.querySelector('.jp-GpuMem-legend')?.textContent).toContain('started from this notebook');
  });

  it('says which host PIDs this kernel may be, and counts them apart from other processes', () => {
    render(fx.ambiguousDevice());
    expect(rows().ambiguous).toBe(
      'this kernel or another (ambiguous) | this kernel is one of host PIDs 4000000, 4000100'
    );
    expect(host.querySelector('.jp-GpuMem-seg-uncertain')).not.toBeNull();
    expect(processMeta(fx.ambiguousDevice().processes[2], [], untranslated)).toBe(
      'PID 3900000 · not visible here'
    );
  });

  it('offers End only for the notebook’s process, asks again, and shows the kernel’s refusal', async () => {
    const asked: Array<{ pid: number; create_time: number }> = [];
    const end: IProcessEnd = {
      run: ref => {
        asked.push(ref);
        return Promise.resolve('not a process of this kernel or of its predecessor in this notebook');
      }
    };
    render(fx.containerDevice(), end);
    const buttons = host.querySelectorAll('.jp-GpuMem-end');
    expect(buttons).toHaveLength(1);
    expect(buttons[0].closest('tr')?.getAttribute('data-relation')).toBe('notebook');
    act(() => (buttons[0] as HTMLButtonElement).click());
    expect(asked).toEqual([]); // a second click confirms: it stops the user's own run
    expect(buttons[0].textContent).toBe('End PID 88?');
    await act(async () => {
      (buttons[0] as HTMLButtonElement).click();
      await Promise.resolve();
    });
    expect(asked).toEqual([{ pid: 88, create_time: 1763855100.5 }]);
    expect(host.querySelector('.jp-GpuMem-procEnd')?.textContent).toContain('not a process of this kernel');
  });

  it('groups the ranks of a run started from this notebook, in rank order, each labelled with its rank', () => {
    const base = fx.containerDevice();
    const [kernel, child, external] = base.processes;
    const GIB = 1024 ** 3;
    // torchrun's four ranks, rank 2 the largest and rank 0 the smallest; the kernel sits between them by size
    const ranks: IGpuProcess[] = [3, 9, 12, 5].map((gib, rank) => ({
      ...child,
      pid: 4000300 + rank,
      local_pid: 90 + rank,
      used: gib * GIB,
      cmdline: 'python -m torch.distributed.run train.py',
      rank: { rank, local_rank: rank, world_size: 4 }
    }));
    render({ ...base, processes: [external, kernel, ...ranks] });
    const labels = Array.from(host.querySelectorAll('.jp-GpuMem-processes tbody tr')).map(
      tr => tr.querySelector('.jp-GpuMem-procLabel')?.textContent
    );
    expect(labels).toEqual([
      'external',
      'started from this notebook · rank 0/4',
      'started from this notebook · rank 1/4',
      'started from this notebook · rank 2/4',
      'started from this notebook · rank 3/4',
      'this kernel'
    ]);
    const title = host.querySelectorAll('.jp-GpuMem-procLabel')[2].getAttribute('title');
    expect(title).toContain('RANK 1 of WORLD_SIZE 4, LOCAL_RANK 1');
  });

  it('says no rank for a process without one, nor for an older kernel that sends none', () => {
    const [, child] = fx.containerDevice().processes;
    expect(rankText(child, untranslated)).toBeNull();
    expect(rankText({ ...child, rank: null }, untranslated)).toBeNull();
    expect(rankText({ ...child, rank: { rank: 7, local_rank: null, world_size: 8 } }, untranslated)).toBe(
      'rank 7/8'
    );
  });
});
