import * as fs from 'fs';
import * as path from 'path';

import { SampleBuffer } from '../samplebuffer';
import {
  ambiguousPids,
  barTotal,
  deviceKey,
  deviceSegments,
  endableProcess,
  type IKernelSession,
  isSelf,
  kernelTotal,
  labelProcess,
  primaryDevice,
  processRelation
} from '../sample';
import type { IDevice, IGpuProcess } from '../../wire/protocol';
import { DEFAULT_SETTINGS, historySeconds, readSettings, usageLevel } from '../../settings';
import { VERSION } from '../../version';
import * as fx from '../../__tests__/fixtures';

const { GIB, MIB } = fx;

describe('labelProcess', () => {
  const sessions = new Map<string, IKernelSession>([
    [
      fx.OTHER_KERNEL_ID,
      { id: 'session-big', path: 'experiments/big.ipynb', type: 'notebook', name: 'big.ipynb' }
    ],
    ['c0ffee00-0000', { id: 'session-console', path: 'Console 1', type: 'console', name: 'Console 1' }]
  ]);
  const proc = (over: Partial<IGpuProcess>): IGpuProcess => ({
    pid: 1,
    name: 'python',
    used: GIB,
    kernel_id: null,
    this_kernel: false,
    ...over
  });

  it('names this kernel', () => {
    expect(labelProcess(proc({ this_kernel: true, kernel_id: fx.KERNEL_ID }), sessions)).toBe('this kernel');
  });

  it('names other kernels of this server by their notebook or console', () => {
    expect(labelProcess(proc({ kernel_id: fx.OTHER_KERNEL_ID }), sessions)).toBe(
      'notebook: experiments/big.ipynb'
    );
    expect(labelProcess(proc({ kernel_id: 'c0ffee00-0000' }), sessions)).toBe('console: Console 1');
  });

  it('shortens unknown kernel ids', () => {
    expect(labelProcess(proc({ kernel_id: fx.UNKNOWN_KERNEL_ID }), sessions)).toBe('kernel deadbeef');
  });

  it('calls the rest external', () => {
    expect(labelProcess(proc({}), sessions)).toBe('external');
  });
});

describe('deviceSegments', () => {
  const sum = (device: IDevice): number => deviceSegments(device).reduce((a, s) => a + s.bytes, 0);

  it('splits the allocator, the context, other processes and free', () => {
    const d = fx.device0();
    expect(deviceSegments(d)).toEqual([
      { key: 'allocated', bytes: 4 * GIB },
      { key: 'cached', bytes: 2 * GIB },
      { key: 'context', bytes: 512 * MIB },
      { key: 'others', bytes: 12 * GIB - (6 * GIB + 512 * MIB) },
      { key: 'free', bytes: fx.DEVICE_TOTAL - 12 * GIB }
    ]);
    expect(sum(d)).toBe(d.total);
  });

  it('shows one "this kernel" segment before torch uses CUDA', () => {
    const d: IDevice = { ...fx.device0(), allocator: null, this_kernel: 300 * MIB, used: 2 * GIB };
    expect(deviceSegments(d)).toEqual([
      { key: 'kernel', bytes: 300 * MIB },
      { key: 'others', bytes: 2 * GIB - 300 * MIB },
      { key: 'free', bytes: fx.DEVICE_TOTAL - 2 * GIB }
    ]);
  });

  it('treats an unlisted kernel (containers) as its reserved memory', () => {
    const d: IDevice = { ...fx.device0(), this_kernel: null };
    expect(kernelTotal(d)).toBe(6 * GIB);
    const segs = deviceSegments(d);
    expect(segs.find(s => s.key === 'context')?.bytes).toBe(0);
    expect(segs.find(s => s.key === 'others')?.bytes).toBe(6 * GIB);
    expect(sum(d)).toBe(d.total);
  });

  it('never goes negative when readings disagree', () => {
    const d: IDevice = {
      ...fx.device0(),
      used: 5 * GIB, // read before the kernel's figure grew
      this_kernel: 5 * GIB, // less than reserved
      allocator: { ...fx.device0().allocator!, allocated: 4 * GIB, reserved: 6 * GIB }
    };
    for (const s of deviceSegments(d)) {
      expect(s.bytes).toBeGreaterThanOrEqual(0);
    }
    expect(sum(d)).toBe(d.total);
  });

  it('leaves out what NVML could not read', () => {
    const d: IDevice = { ...fx.device0(), used: null, total: null };
    expect(deviceSegments(d).map(s => s.key)).toEqual(['allocated', 'cached', 'context']);
    expect(barTotal(d, deviceSegments(d))).toBe(6 * GIB + 512 * MIB);
    expect(deviceSegments(fx.unreadableDevice())).toEqual([{ key: 'kernel', bytes: 0 }]);
  });

  it('tells MIG slices from their GPU', () => {
    const gpu = { ...fx.device0(), nvml_index: 1, uuid: null, cuda_index: null };
    const slice = { ...fx.migSlice(), uuid: null };
    expect(deviceKey(gpu)).not.toBe(deviceKey(slice));
    expect(deviceKey(fx.migSlice())).toBe('MIG-0a1b2c3d-4e5f-6789-abcd-ef0123456789');
  });

  it('shows a hidden device as other processes and free', () => {
    const d = fx.device1();
    expect(deviceSegments(d)).toEqual([
      { key: 'kernel', bytes: 0 },
      { key: 'others', bytes: 300 * MIB },
      { key: 'free', bytes: fx.DEVICE_TOTAL - 300 * MIB }
    ]);
  });
});

describe('primaryDevice', () => {
  it('picks the device this kernel uses most', () => {
    const s = fx.sample();
    s.gpu.devices = [fx.device1(), { ...fx.device0(), nvml_index: 5, cuda_index: 1 }];
    expect(primaryDevice(s)?.nvml_index).toBe(5);
  });

  it('falls back to cuda:0, then to the first device', () => {
    const s = fx.sample();
    s.gpu.devices = [
      { ...fx.device1(), nvml_index: 0 },
      { ...fx.device0(), this_kernel: null, allocator: null, nvml_index: 1 }
    ];
    expect(primaryDevice(s)?.nvml_index).toBe(1);
    s.gpu.devices = [fx.device1()];
    expect(primaryDevice(s)?.nvml_index).toBe(1);
    expect(primaryDevice(fx.noGpuSample())).toBeNull();
    expect(primaryDevice(null)).toBeNull();
  });
});

describe('SampleBuffer', () => {
  it('keeps the window and merges overlapping history', () => {
    const h = new SampleBuffer(10);
    expect(h.merge([fx.sample(1, 100), fx.sample(2, 101)])).toBe(2);
    expect(h.push(fx.sample(2, 101))).toBe(false); // duplicate
    expect(h.merge([fx.sample(1, 100), fx.sample(2, 101), fx.sample(3, 102)])).toBe(1);
    expect(h.toArray().map(s => s.seq)).toEqual([1, 2, 3]);
    h.push(fx.sample(4, 111.5));
    expect(h.toArray().map(s => s.seq)).toEqual([3, 4]);
    expect(h.latest?.seq).toBe(4);
  });

  it('keeps samples across a restart (seq starts again, time does not)', () => {
    const h = new SampleBuffer(600);
    h.push(fx.sample(500, 1000));
    h.push(fx.sample(0, 1003));
    expect(h.length).toBe(2);
  });

  it('caps its length and compacts', () => {
    const h = new SampleBuffer(1e9, 100);
    for (let i = 0; i < 5000; i++) {
      h.push(fx.sample(i, i));
    }
    expect(h.length).toBe(100);
    expect(h.toArray()[0].seq).toBe(4900);
    h.windowSeconds = 10;
    expect(h.length).toBe(11);
    h.clear();
    expect(h.length).toBe(0);
    expect(h.latest).toBeNull();
  });

  it('returns the same array until something changes', () => {
    const h = new SampleBuffer(60);
    h.push(fx.sample(1, 1));
    const a = h.toArray();
    expect(h.toArray()).toBe(a);
    h.push(fx.sample(2, 2));
    expect(h.toArray()).not.toBe(a);
  });
});

describe('settings', () => {
  it('has the documented defaults', () => {
    expect(readSettings({})).toEqual(DEFAULT_SETTINGS);
    expect(DEFAULT_SETTINGS).toEqual({
      interval: 1,
      historyMinutes: 10,
      warnThreshold: 85,
      criticalThreshold: 95,
      units: 'GiB',
      autoLoad: true,
      showStatusBar: true,
      confirmRestart: true,
      clearOutputsOnRestart: false,
      restartTimeoutSeconds: 30,
      batchRounding: 'pow2',
      idleMinutes: 30,
      oomTimeline: false,
      seqMultiple: 64
    });
  });

  it('matches schema/plugin.json', () => {
    const schema = JSON.parse(
      fs.readFileSync(path.join(__dirname, '..', '..', '..', 'schema', 'plugin.json'), 'utf8')
    ) as { properties: Record<string, { default: unknown }> };
    const defaults = Object.fromEntries(
      Object.entries(schema.properties).map(([key, p]) => [key, p.default])
    );
    expect(defaults).toEqual(DEFAULT_SETTINGS);
  });

  it('clamps and falls back', () => {
    const s = readSettings({
      interval: 0,
      historyMinutes: 500,
      warnThreshold: 90,
      criticalThreshold: 50,
      units: 'KB',
      autoLoad: 'no',
      confirmRestart: 'yes',
      restartTimeoutSeconds: 1,
      batchRounding: '7'
    });
    expect(s.batchRounding).toBe('pow2');
    expect(readSettings({ batchRounding: '8' }).batchRounding).toBe('8');
    expect([0, 100.4, 1e6, 'x'].map(seqMultiple => readSettings({ seqMultiple }).seqMultiple)).toEqual([
      1, 100, 65536, 64
    ]);
    expect(s.confirmRestart).toBe(true);
    expect(s.restartTimeoutSeconds).toBe(5);
    expect(s.interval).toBe(0.1);
    expect(s.historyMinutes).toBe(60);
    expect(s.criticalThreshold).toBe(90);
    expect(s.units).toBe('GiB');
    expect(s.autoLoad).toBe(true);
    expect(historySeconds(s)).toBe(3600);
  });

  it('computes usage levels', () => {
    expect(usageLevel(50, DEFAULT_SETTINGS)).toBe('ok');
    expect(usageLevel(85, DEFAULT_SETTINGS)).toBe('warn');
    expect(usageLevel(95, DEFAULT_SETTINGS)).toBe('critical');
    expect(usageLevel(null, DEFAULT_SETTINGS)).toBe('ok');
  });
});

describe('version', () => {
  it('matches package.json', () => {
    const pkg = JSON.parse(
      fs.readFileSync(path.join(__dirname, '..', '..', '..', 'package.json'), 'utf8')
    ) as { version: string };
    expect(VERSION).toBe(pkg.version);
  });
});

describe('host PIDs matched in a container', () => {
  const sessions = new Map<string, IKernelSession>();

  it('labels this kernel, a probable match, an ambiguous one, the notebook’s process and an outsider', () => {
    const [kernel, child, outsider] = fx.containerDevice().processes;
    expect(labelProcess(kernel, sessions)).toBe('this kernel');
    expect(labelProcess({ ...kernel, this_kernel: false, relation: 'probably_this_kernel' }, sessions)).toBe(
      'probably this kernel (host PID 4000000)'
    );
    expect(labelProcess(fx.ambiguousDevice().processes[0], sessions)).toBe(
      'this kernel or another (ambiguous)'
    );
    expect(labelProcess(child, sessions)).toBe('started from this notebook');
    expect(labelProcess(outsider, sessions)).toBe('external');
  });

  it('reads the relation of an older kernel from this_kernel and kernel_id', () => {
    const [mine, other, script] = fx.device0().processes;
    expect([mine, other, script].map(processRelation)).toEqual(['this_kernel', 'other_kernel', 'external']);
    expect(isSelf(mine)).toBe(true);
    expect(endableProcess(script)).toBeNull();
  });

  it('ends only the notebook’s own process, by its PID in the kernel’s namespace and its start time', () => {
    const [kernel, child, outsider] = fx.containerDevice().processes;
    expect(endableProcess(child)).toEqual({ pid: 88, create_time: 1763855100.5 });
    expect(endableProcess(kernel)).toBeNull();
    expect(endableProcess(outsider)).toBeNull();
    expect(endableProcess({ ...child, create_time: null })).toBeNull();
  });

  it('gives the notebook’s processes their own bar segment, apart from the kernel and the others', () => {
    const d = fx.containerDevice();
    expect(deviceSegments(d)).toEqual([
      { key: 'allocated', bytes: 4 * GIB },
      { key: 'cached', bytes: 2 * GIB },
      { key: 'context', bytes: 512 * MIB },
      { key: 'notebook', bytes: 8 * GIB },
      { key: 'others', bytes: 48 * GIB - 6 * GIB - 512 * MIB - 8 * GIB },
      { key: 'free', bytes: 32 * GIB }
    ]);
  });

  it('never counts ambiguous host PIDs as other processes', () => {
    const d = fx.ambiguousDevice();
    expect(deviceSegments(d)).toEqual([
      { key: 'kernel', bytes: 0 },
      { key: 'uncertain', bytes: 4 * GIB },
      { key: 'others', bytes: 48 * GIB - 4 * GIB },
      { key: 'free', bytes: 32 * GIB }
    ]);
    expect(ambiguousPids(d)).toEqual([fx.HOST_PID, fx.OTHER_HOST_PID]);
    expect(ambiguousPids(fx.containerDevice())).toEqual([]);
  });
});
