import { untranslated } from '../../ui/i18n';
import { workersText, workersTitle } from '../workers';

const GIB = 1024 ** 3;
const MIB = 1024 ** 2;

describe('the DataLoader workers row', () => {
  it('leads with unique memory, keeps RSS for reference and shows the growth per minute', () => {
    const children = { count: 4, rss: 5.1 * GIB, uss: 1.2 * GIB, pss: 2 * GIB, uss_growth_per_min: 40 * MIB };
    expect(workersText(children, 'auto', untranslated)).toBe(
      '4 processes, 1.20 GiB unique (RSS 5.10 GiB), +40.0 MiB/min'
    );
    expect(workersTitle(children, 'auto', untranslated)).toContain(
      'PSS (shared pages split between their users): 2.00 GiB'
    );
  });

  it('uses the singular for one worker and hides growth that is noise or not known yet', () => {
    const one = { count: 1, rss: 512 * MIB, uss: 64 * MIB, pss: null, uss_growth_per_min: 1000 };
    expect(workersText(one, 'MiB', untranslated)).toBe('1 process, 64 MiB unique (RSS 512 MiB)');
    expect(workersText({ ...one, uss_growth_per_min: null }, 'MiB', untranslated)).toBe(
      '1 process, 64 MiB unique (RSS 512 MiB)'
    );
    expect(workersTitle(one, 'MiB', untranslated)).not.toContain('PSS');
  });

  it('shows a shrinking USS with a minus sign', () => {
    const children = { count: 2, rss: 2 * GIB, uss: 1 * GIB, pss: null, uss_growth_per_min: -8 * MIB };
    expect(workersText(children, 'MiB', untranslated)).toMatch(/, \u22128.0 MiB\/min$/);
  });

  it('says when unique memory is not measurable', () => {
    const children = { count: 2, rss: 1 * GIB, uss: null, pss: null, uss_growth_per_min: null };
    expect(workersText(children, 'GiB', untranslated)).toBe(
      '2 processes, 1.00 GiB RSS, unique memory not measurable'
    );
  });

  it('shows RSS alone for a kernel from before unique memory, and "none" without workers', () => {
    expect(workersText({ count: 2, rss: 1 * GIB }, 'GiB', untranslated)).toBe('2 processes, 1.00 GiB RSS');
    expect(workersTitle({ count: 2, rss: 1 * GIB }, 'GiB', untranslated)).toBeUndefined();
    expect(workersText({ count: 0, rss: 0 }, 'GiB', untranslated)).toBe('none');
  });
});
