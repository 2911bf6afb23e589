import {
  formatBytes,
  formatBytesPair,
  formatCount,
  formatDuration,
  formatJoules,
  formatMs,
  formatPercent,
  formatPercentValue,
  formatSeconds,
  formatTimeOfDay,
  formatWattHours,
  formatWatts,
  isSizeUnit,
  percentOf,
  scaleFor,
  significantDigits
} from '../format';

const GIB = 1024 ** 3;
const MIB = 1024 ** 2;

describe('formatBytes', () => {
  it.each([
    [12262485688, 'GiB', '11.42 GiB'],
    [17171480576, 'GiB', '15.99 GiB'],
    [17171480576, 'GB', '17.17 GB'],
    [17171480576, 'MiB', '16376 MiB'],
    [0, 'GiB', '0.00 GiB'],
    [0, 'GB', '0.00 GB'],
    [0, 'MiB', '0 MiB'],
    [0, 'auto', '0 B'],
    [512, 'auto', '512 B'],
    [1536, 'auto', '1.50 KiB'],
    [300 * MIB, 'auto', '300 MiB'],
    [42.5 * MIB, 'auto', '42.5 MiB'],
    [1.5 * GIB, 'auto', '1.50 GiB'],
    [11.4 * GIB, 'auto', '11.4 GiB'],
    [2 * 1024 * GIB, 'auto', '2.00 TiB']
  ] as const)('%d in %s → %s', (bytes, unit, expected) => {
    expect(formatBytes(bytes, unit)).toBe(expected);
  });

  it('defaults to GiB', () => {
    expect(formatBytes(GIB)).toBe('1.00 GiB');
  });

  it('takes the number of decimals', () => {
    expect(formatBytes(17171480576, 'GiB', 1)).toBe('16.0 GiB');
    expect(formatBytes(300 * MIB, 'MiB', 2)).toBe('300.00 MiB');
  });

  it.each([
    [16 * GIB, 'GiB', '16.0 GiB'],
    [17171480576, 'GB', '17.2 GB'],
    [16 * GIB, 'MiB', '16384 MiB'],
    [7.5 * GIB, 'auto', '7.5 GiB'],
    [11.4 * GIB, 'auto', '11.4 GiB'],
    [512 * MIB, 'auto', '512 MiB'],
    [512, 'auto', '512 B']
  ] as const)('short: %d in %s → %s (at most one decimal)', (bytes, unit, expected) => {
    expect(formatBytes(bytes, unit, 'short')).toBe(expected);
  });

  it('formats in a scale shared by several values (the ticks of one axis)', () => {
    const scale = scaleFor(10 * GIB, 'auto');
    expect(formatBytes(2.5 * GIB, scale, 1)).toBe('2.5 GiB');
    expect(formatBytes(512 * MIB, scale)).toBe('0.5 GiB');
  });

  // The kernel's RSS read "0.06 GiB" in the panel: one significant digit. A value too small for the unit
  // picked steps down to the unit that shows it with two or three.
  it.each([
    [0.06 * GIB, 'GiB', undefined, '61 MiB'],
    [0.0093 * GIB, 'GiB', undefined, '9.5 MiB'],
    [0.5 * GIB, 'GiB', 'short', '512 MiB'],
    [0.04 * GIB, 'GiB', 'short', '41 MiB'],
    [5 * MIB, 'MiB', undefined, '5.0 MiB'],
    [0.3 * MIB, 'MiB', undefined, '307 KiB'],
    [60e6, 'GB', undefined, '60 MB'],
    [0.5e9, 'GB', 'short', '500 MB'],
    [512, 'GiB', undefined, '512 B'],
    [-0.06 * GIB, 'GiB', undefined, '-61 MiB']
  ] as const)('%d in %s (%s) is too small to read there → %s', (bytes, unit, digits, expected) => {
    expect(formatBytes(bytes, unit, digits)).toBe(expected);
  });

  it.each([
    [0.39 * GIB, 'GiB', undefined, '0.39 GiB'],
    [0.1 * GIB, 'GiB', undefined, '0.10 GiB'],
    [1.5 * GIB, 'GiB', 'short', '1.5 GiB'],
    [12 * MIB, 'MiB', undefined, '12 MiB'],
    [0, 'GiB', 'short', '0.0 GiB']
  ] as const)('%d in %s (%s) reads in the unit picked → %s', (bytes, unit, digits, expected) => {
    expect(formatBytes(bytes, unit, digits)).toBe(expected);
  });

  it('shows every size with at least two significant digits in every unit of the settings', () => {
    for (const unit of ['GiB', 'GB', 'MiB', 'auto'] as const) {
      for (const digits of [undefined, 'short'] as const) {
        for (let bytes = 700; bytes < 64 * GIB; bytes *= 1.37) {
          const number = formatBytes(bytes, unit, digits).split(' ')[0];
          expect([unit, digits, bytes, number, significantDigits(number) >= 2]).toEqual([
            unit,
            digits,
            bytes,
            number,
            true
          ]);
        }
      }
    }
  });

  it('keeps a scale shared by the ticks of one axis, however small the value', () => {
    expect(formatBytes(0.06 * GIB, scaleFor(10 * GIB, 'auto'), 1)).toBe('0.1 GiB');
  });

  it.each([null, undefined, NaN, Infinity])('%p (not measured) → n/a', value => {
    expect(formatBytes(value, 'GiB')).toBe('n/a');
    expect(formatBytes(value, 'auto')).toBe('n/a');
  });
});

describe('formatBytesPair', () => {
  it('shares the unit of the whole', () => {
    expect(formatBytesPair(11.4 * GIB, 16 * GIB, 'GiB', 1)).toBe('11.4 / 16.0 GiB');
    expect(formatBytesPair(300 * MIB, 16 * GIB, 'auto')).toBe('0.3 / 16.0 GiB');
    expect(formatBytesPair(300 * MIB, 16 * GIB, 'MiB')).toBe('300 / 16384 MiB');
    expect(formatBytesPair(0, 16 * GIB, 'GB', 1)).toBe('0.0 / 17.2 GB');
  });

  it('short: at most one decimal in the unit of the whole', () => {
    expect(formatBytesPair(7.5 * GIB, 8 * GIB, 'auto', 'short')).toBe('7.5 / 8.0 GiB');
    expect(formatBytesPair(300 * MIB, 512 * MIB, 'auto', 'short')).toBe('300 / 512 MiB');
    expect(formatBytesPair(12 * GIB, 16 * GIB, 'GiB', 'short')).toBe('12.0 / 16.0 GiB');
    expect(formatBytesPair(12 * GIB, 16 * GIB, 'MiB', 'short')).toBe('12288 / 16384 MiB');
  });

  it('shows n/a for missing sides', () => {
    expect(formatBytesPair(null, 16 * GIB, 'GiB', 1)).toBe('n/a / 16.0 GiB');
    expect(formatBytesPair(GIB, null)).toBe('1.00 GiB / n/a');
  });
});

describe('percent', () => {
  it('formats shares', () => {
    expect(formatPercent(1, 4)).toBe('25.0%');
    expect(formatPercent(2, 3, 0)).toBe('67%');
    expect(percentOf(85, 100)).toBe(85);
  });

  it('is n/a without a whole', () => {
    expect(formatPercent(1, 0)).toBe('n/a');
    expect(formatPercent(null, 10)).toBe('n/a');
    expect(percentOf(1, null)).toBeNull();
  });

  it('formats measured percentages', () => {
    expect(formatPercentValue(37)).toBe('37%');
    expect(formatPercentValue(null)).toBe('n/a');
  });
});

describe('counts and times of the outputs', () => {
  it('groups digits and keeps one decimal below 100', () => {
    expect(formatCount(34666.4)).toBe('34,666');
    expect(formatMs(12.345)).toBe('12.3');
    expect(formatMs(250.4)).toBe('250');
    expect(formatMs(null)).toBe('n/a');
    expect(formatSeconds(4.71)).toBe('4.7 s');
    expect(formatSeconds(250.4)).toBe('250 s');
  });
});

describe('time', () => {
  it('formats local time of day', () => {
    const when = new Date(2025, 10, 22, 9, 3, 4);
    expect(formatTimeOfDay(when.getTime() / 1000)).toBe('09:03:04');
    expect(formatTimeOfDay(new Date(2025, 10, 22, 23, 59, 0).getTime() / 1000 + 0.7)).toBe('23:59:00');
  });

  it('formats durations', () => {
    expect(formatDuration(45)).toBe('45 s');
    expect(formatDuration(600)).toBe('10 min');
    expect(formatDuration(7200)).toBe('2 h');
  });
});

describe('units', () => {
  it('knows its units', () => {
    expect(isSizeUnit('GiB')).toBe(true);
    expect(isSizeUnit('auto')).toBe(true);
    expect(isSizeUnit('KB')).toBe(false);
    expect(isSizeUnit(3)).toBe(false);
    expect(scaleFor(5, 'GB').factor).toBe(1e9);
  });
});

describe('power and energy', () => {
  it('are watts from milliwatts and watt-hours from joules, as the kernel writes them', () => {
    expect([null, 8460, 99440, 250400].map(formatWatts)).toEqual(['n/a', '8.5 W', '99.4 W', '250 W']);
    expect([null, 50, 3600 * 2.5, 3600 * 12.34, 3600 * 1250].map(formatWattHours)).toEqual([
      'n/a',
      '0.0139 Wh',
      '2.50 Wh',
      '12.3 Wh',
      '1.25 kWh'
    ]);
    expect([null, 0.0125, 2.5, 250.4, 1250].map(formatJoules)).toEqual([
      'n/a',
      '12.5 mJ',
      '2.50 J',
      '250 J',
      '1.25 kJ'
    ]);
  });
});
