import * as React from 'react';
import { act } from 'react';
import { createRoot, type Root } from 'react-dom/client';

import { labelProcess } from '../../channel/sample';
import { DEFAULT_SETTINGS } from '../../settings';
import { untranslated } from '../../ui/i18n';
import type { IDevice } from '../../wire/protocol';
import { DeviceSection, type IProcessEnd, processMeta } from '../device';
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
});
