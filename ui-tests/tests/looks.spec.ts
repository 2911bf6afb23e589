/**
 * Looks, measured in a real browser: every text and every button of jupyterlab-gpumem meets WCAG AA in the
 * light and the dark theme, and the status-bar item and the panel's host facts sit and read like
 * JupyterLab's own.
 *
 * The scene is the one a user meets after a failed training step: the panel with a GPU (this machine has
 * none: tests/fake_nvml.py stands in for the driver, as in devices.spec.ts), an analysis output at a batch
 * that does not fit, a benchmark output, a real torch.OutOfMemoryError with its checklist inline and in the
 * panel, the memory timeline of a predicted step, and the report of "Clear GPU memory". Contrast
 * is computed from computed styles, so it checks what the themes actually resolve to.
 */
import * as fs from 'fs';
import * as path from 'path';
import { expect, galata, IJupyterLabPageFixture, test } from '@jupyterlab/galata';
import { openNew } from './notebooks';

const TESTS_DIR = path.resolve(__dirname, '..', '..', 'tests');

const OOM_MESSAGE =
  'CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 15.70 GiB of which 1.10 GiB is free. ' +
  'Including non-PyTorch memory, this process has 14.58 GiB memory in use. Of the allocated memory 13.90 GiB is ' +
  'allocated by PyTorch, and 412.00 MiB is reserved by PyTorch but unallocated.';

/** The roots of our UI: the panel, the inline checklist, the rich outputs and the status-bar item. */
const ROOTS = ['#jp-GpuMem-panel', '.jp-GpuMem-output', '.jp-GpuMem-richOutput', '.jp-GpuMem-statusWidget'];

test.use({
  viewport: { width: 1400, height: 900 },
  // Every cell attached to the page, so that the audit reaches outputs scrolled out of view.
  mockSettings: {
    ...galata.DEFAULT_SETTINGS,
    '@jupyterlab/notebook-extension:tracker': {
      ...galata.DEFAULT_SETTINGS['@jupyterlab/notebook-extension:tracker'],
      windowingMode: 'none'
    }
  }
});

/** One element that fails: what it is, its text, the ratio measured and the ratio needed. */
interface IOffender {
  readonly what: string;
  readonly text: string;
  readonly ratio: number;
  readonly need: number;
  readonly fg: string;
  readonly bg: string;
}

interface IAudit {
  readonly texts: number;
  readonly buttons: number;
  readonly offenders: IOffender[];
  /** The lowest ratios measured, with where (for the record: contrast.json beside the test's output). */
  readonly lowest: { text: [number, string]; boundary: [number, string] };
}

/**
 * Walk every visible element under the roots (in the page): text against its effective background
 * (ancestors' backgrounds composited, alpha and opacity blended), 4.5 : 1 (3 : 1 for large text); each
 * enabled button's boundary (its border, or its fill) against the surface around it, 3 : 1.
 */
async function audit(page: IJupyterLabPageFixture): Promise<IAudit> {
  return page.evaluate((roots: string[]) => {
    type Rgba = [number, number, number, number];
    const parse = (value: string): Rgba | null => {
      const v = value.trim();
      if (v === 'transparent') {
        return [0, 0, 0, 0];
      }
      let m = /^rgba?\((.*)\)$/.exec(v);
      if (m) {
        const p = m[1]
          .split(/[\s,/]+/)
          .filter(Boolean)
          .map(Number);
        return [p[0], p[1], p[2], p.length > 3 ? p[3] : 1];
      }
      m = /^color\(srgb\s+(.*)\)$/.exec(v); // what Chromium computes for color-mix()
      if (m) {
        const p = m[1]
          .split(/[\s/]+/)
          .filter(Boolean)
          .map(Number);
        return [p[0] * 255, p[1] * 255, p[2] * 255, p.length > 3 ? p[3] : 1];
      }
      return null;
    };
    /** `top` with alpha over an opaque `bottom`. */
    const over = (top: Rgba, bottom: Rgba, alpha = top[3]): Rgba => [
      top[0] * alpha + bottom[0] * (1 - alpha),
      top[1] * alpha + bottom[1] * (1 - alpha),
      top[2] * alpha + bottom[2] * (1 - alpha),
      1
    ];
    const luminance = (c: Rgba): number => {
      const [r, g, b] = c.slice(0, 3).map(v => {
        const s = v / 255;
        return s <= 0.03928 ? s / 12.92 : ((s + 0.055) / 1.055) ** 2.4;
      });
      return 0.2126 * r + 0.7152 * g + 0.0722 * b;
    };
    const ratio = (a: Rgba, b: Rgba): number => {
      const [la, lb] = [luminance(a), luminance(b)];
      return (Math.max(la, lb) + 0.05) / (Math.min(la, lb) + 0.05);
    };
    const show = (c: Rgba): string => `rgb(${c.slice(0, 3).map(Math.round).join(' ')})`;
    /** The colour painted behind `el`: its own and its ancestors' backgrounds, composited. */
    const background = (el: Element | null): Rgba => {
      const layers: Rgba[] = [];
      for (let node = el; node !== null; node = node.parentElement) {
        const bg = parse(getComputedStyle(node).backgroundColor);
        if (bg !== null && bg[3] > 0) {
          layers.push(bg);
          if (bg[3] >= 1) {
            break;
          }
        }
      }
      let out: Rgba = [255, 255, 255, 1]; // the canvas
      for (const layer of layers.reverse()) {
        out = over(layer, out);
      }
      return out;
    };
    /** The product of the opacities of `el` and its ancestors. */
    const opacity = (el: Element): number => {
      let o = 1;
      for (let node: Element | null = el; node !== null; node = node.parentElement) {
        o *= Number(getComputedStyle(node).opacity);
      }
      return o;
    };
    const describe = (el: Element): string => {
      const parts: string[] = [];
      for (let node: Element | null = el; node !== null && parts.length < 3; node = node.parentElement) {
        const own = [...node.classList].filter(c => c.startsWith('jp-GpuMem-')).slice(0, 2);
        parts.unshift(node.tagName.toLowerCase() + own.map(c => `.${c}`).join(''));
        if (node.matches(roots.join(','))) {
          break;
        }
      }
      return parts.join(' > ');
    };
    const visible = (el: Element): boolean => {
      const box = el.getBoundingClientRect();
      return (
        box.width > 0 &&
        box.height > 0 &&
        el.checkVisibility({ checkOpacity: true, checkVisibilityCSS: true }) &&
        el.closest('button:disabled, [aria-disabled="true"], [aria-hidden="true"]') === null
      );
    };
    const offenders: Array<{
      what: string;
      text: string;
      ratio: number;
      need: number;
      fg: string;
      bg: string;
    }> = [];
    let texts = 0;
    const lowest: { text: [number, string]; boundary: [number, string] } = {
      text: [Infinity, ''],
      boundary: [Infinity, '']
    };
    let buttons = 0;
    const seen = new Set<Element>();
    for (const root of document.querySelectorAll(roots.join(','))) {
      for (const el of [root, ...root.querySelectorAll('*')]) {
        if (seen.has(el) || !visible(el)) {
          continue;
        }
        seen.add(el);
        const style = getComputedStyle(el);
        const isSvgText = el instanceof SVGTextElement;
        const ownText = isSvgText
          ? (el.textContent ?? '').trim()
          : [...el.childNodes]
              .filter(n => n.nodeType === Node.TEXT_NODE)
              .map(n => n.textContent ?? '')
              .join('')
              .trim();
        if (ownText !== '') {
          const colour = parse(isSvgText ? style.fill : style.color);
          if (colour !== null) {
            texts++;
            const bg = background(el);
            const fg = over(colour, bg, colour[3] * opacity(el));
            const size = parseFloat(style.fontSize);
            const large = size >= 24 || (size >= 18.66 && Number(style.fontWeight) >= 700);
            const need = large ? 3 : 4.5;
            const r = ratio(fg, bg);
            if (r < lowest.text[0]) {
              lowest.text = [Math.round(r * 100) / 100, `"${ownText.slice(0, 30)}" ${describe(el)}`];
            }
            if (r < need) {
              offenders.push({
                what: describe(el),
                text: ownText.slice(0, 40),
                ratio: Math.round(r * 100) / 100,
                need,
                fg: show(fg),
                bg: show(bg)
              });
            }
          }
        }
        if (el instanceof HTMLButtonElement && !el.disabled) {
          buttons++;
          const around = background(el.parentElement);
          const ownBg = parse(style.backgroundColor) ?? [0, 0, 0, 0];
          const fill = over(ownBg, around);
          // The boundary: the fill, or a border on every side (drawn over the button's own fill).
          const sides = ['Top', 'Right', 'Bottom', 'Left'].map(side => {
            const width = parseFloat(style.getPropertyValue(`border-${side.toLowerCase()}-width`));
            const line = style.getPropertyValue(`border-${side.toLowerCase()}-style`);
            const colour = parse(style.getPropertyValue(`border-${side.toLowerCase()}-color`));
            return width > 0 && line !== 'none' && line !== 'hidden' && colour !== null
              ? ratio(over(colour, fill), around)
              : 0;
          });
          const r = Math.max(ratio(fill, around), Math.min(...sides));
          if (r < lowest.boundary[0]) {
            lowest.boundary = [Math.round(r * 100) / 100, describe(el)];
          }
          if (r < 3) {
            offenders.push({
              what: `${describe(el)} (boundary)`,
              text: (el.textContent ?? '').trim().slice(0, 40),
              ratio: Math.round(r * 100) / 100,
              need: 3,
              fg: show(fill),
              bg: show(around)
            });
          }
        }
      }
    }
    return { texts, buttons, offenders, lowest };
  }, ROOTS);
}

function report(offenders: IOffender[]): string {
  return offenders.map(o => `${o.ratio} < ${o.need}: "${o.text}" ${o.fg} on ${o.bg} — ${o.what}`).join('\n');
}

/** The panel with a fake GPU, an analysis that does not fit, and an OOM with its checklist in both places. */
async function buildScene(page: IJupyterLabPageFixture, tmpPath: string): Promise<void> {
  await openNew(page, `${tmpPath}/looks.ipynb`, [
    [
      'import os, sys',
      `sys.path.insert(0, ${JSON.stringify(TESTS_DIR)})`,
      'from fake_nvml import FakeGpu, GiB, install_in_running_kernel',
      'install_in_running_kernel([',
      '    FakeGpu(name="NVIDIA GeForce RTX 4080 SUPER", uuid="GPU-11111111-2222-3333-4444-555555555555",',
      '            total=16 * GiB, used=15 * GiB, processes=[(os.getpid(), 3 * GiB), (4194301, 11 * GiB)]),',
      '])'
    ].join('\n'),
    [
      'import torch',
      'from torch import nn',
      'model = nn.Sequential(nn.Conv2d(3, 64, 3, padding=1), nn.ReLU(), nn.Conv2d(64, 64, 3, padding=1),',
      '                      nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))',
      'net = nn.Sequential(nn.Flatten(), nn.Linear(3 * 16 * 16, 64), nn.ReLU(), nn.Linear(64, 10))'
    ].join('\n'),
    '%gpumem analyze model --batch 2048 --input 3x224x224 --target "RTX 4080 Super" --amp bf16 --optimizer adamw',
    '%gpumem benchmark net --synthetic 3x16x16 --classes 10 --batch-sizes 8,16,32 --num-workers 0 --steps 3 --warmup 1 --simulate 64MiB',
    '%gpumem analyze net --batch 8 --input 3x16x16 --optimizer adamw --timeline',
    `raise torch.OutOfMemoryError(${JSON.stringify(OOM_MESSAGE)})`
  ]);
  await page.evaluate(async () => {
    await window.jupyterapp.commands.execute('gpumem:open-panel');
  });
  const panel = page.locator('#jp-GpuMem-panel');
  await expect(panel.locator('.jp-GpuMem-root[data-state="live"]')).toBeVisible();
  await page.evaluate(async () => {
    await window.jupyterapp.commands.execute('notebook:run-all-cells');
  });
  await expect(panel.locator('.jp-GpuMem-device')).toHaveCount(1);
  await expect(panel.locator('.jp-GpuMem-processes')).toBeVisible();
  await expect(panel.locator('.jp-GpuMem-host')).toBeVisible();
  await expect(
    page.locator('.jp-GpuMem-analysis .jp-GpuMem-analysisChart svg.jp-GpuMem-chartSvg').first()
  ).toBeVisible({
    timeout: 60000
  });
  await expect(page.locator('.jp-GpuMem-benchmark svg.jp-GpuMem-chartSvg')).toBeVisible({ timeout: 60000 });
  // The memory timeline of a predicted step: its bands, legend, table and buttons are audited too.
  await expect(page.locator('.jp-GpuMem-richOutput-timeline svg').first()).toBeVisible({ timeout: 60000 });
  await expect(panel.locator('.jp-GpuMem-oom')).toBeVisible({ timeout: 60000 });
  await expect(page.locator('.jp-Notebook .jp-GpuMem-output .jp-GpuMem-oomStep').first()).toBeVisible();
  await expect(page.locator('.jp-GpuMem-statusItem')).toContainText('15.0 / 16.0 GiB');
  // And the report of "Clear GPU memory".
  await panel.locator('.jp-GpuMem-actionBar .jp-GpuMem-clearButton').click();
  await expect(panel.locator('.jp-GpuMem-clearReport').first()).toBeVisible({ timeout: 60000 });
}

for (const theme of ['light', 'dark'] as const) {
  test(`text and buttons meet WCAG AA in the ${theme} theme`, async ({ page, tmpPath }, testInfo) => {
    await buildScene(page, tmpPath);
    if (theme === 'dark') {
      await page.theme.setDarkTheme();
    } else {
      await page.theme.setLightTheme();
    }
    await expect(page.locator('body')).toHaveAttribute('data-jp-theme-light', String(theme === 'light'));
    const result = await audit(page);
    fs.writeFileSync(testInfo.outputPath('contrast.json'), JSON.stringify(result, null, 1));
    await page.screenshot({ path: testInfo.outputPath(`looks-${theme}.png`) });
    // The scene is all there: the walk saw our text and our buttons (panel, inline checklist, analysis).
    expect(result.texts).toBeGreaterThan(150);
    expect(result.buttons).toBeGreaterThan(5);
    expect(result.offenders, report(result.offenders)).toEqual([]);

    // The analysis chart at --batch 2048 (where the "256" label sat on the device-limit label): no two of
    // its labels overlap, as the browser lays them out.
    // The first analysis (--batch 2048); the timeline cell's analysis comes later.
    const chart = page.locator('.jp-GpuMem-analysisChart svg.jp-GpuMem-chartSvg').first();
    await chart.screenshot({ path: testInfo.outputPath(`chart-${theme}.png`) });
    const labels = await chart.evaluate(svg =>
      [...svg.querySelectorAll('text:not(.jp-GpuMem-chartAxisLabel)')].map(t => {
        const b = (t as SVGTextElement).getBBox();
        return { text: t.textContent ?? '', x0: b.x, y0: b.y, x1: b.x + b.width, y1: b.y + b.height };
      })
    );
    expect(labels.map(l => l.text)).toEqual(
      expect.arrayContaining(['256', expect.stringMatching(/^device limit/)])
    );
    const overlapping = labels.flatMap((a, i) =>
      labels
        .slice(i + 1)
        .filter(b => a.x0 < b.x1 && b.x0 < a.x1 && a.y0 < b.y1 && b.y0 < a.y1)
        .map(b => `${a.text} × ${b.text}`)
    );
    expect(overlapping).toEqual([]);
  });
}

test('the status-bar item lines up with its neighbours, and host facts read on one line', async ({
  page,
  tmpPath
}, testInfo) => {
  await openNew(page, `${tmpPath}/status.ipynb`, [
    [
      'import os, sys',
      `sys.path.insert(0, ${JSON.stringify(TESTS_DIR)})`,
      'from fake_nvml import FakeGpu, GiB, install_in_running_kernel',
      'install_in_running_kernel([FakeGpu(name="NVIDIA GeForce RTX 4080 SUPER",',
      '    uuid="GPU-11111111-2222-3333-4444-555555555555", total=16 * GiB, used=11 * GiB)])'
    ].join('\n')
  ]);
  await page.evaluate(async () => {
    await window.jupyterapp.commands.execute('gpumem:open-panel');
  });
  const panel = page.locator('#jp-GpuMem-panel');
  await expect(panel.locator('.jp-GpuMem-root[data-state="live"]')).toBeVisible();
  await page.evaluate(async () => {
    await window.jupyterapp.commands.execute('notebook:run-all-cells');
  });
  const item = page.locator('.jp-GpuMem-statusItem');
  await expect(item).toContainText('11.0 / 16.0 GiB');

  // The item's text sits on the same line as the text of JupyterLab's own items beside it.
  const boxes = await page.evaluate(() => {
    const ours = document.querySelector('.jp-GpuMem-statusItem');
    const bar = document.querySelector('#jp-main-statusbar');
    if (ours === null || bar === null) {
      return null;
    }
    const textBox = (el: Element): { top: number; bottom: number } => {
      const range = document.createRange();
      range.selectNodeContents(el);
      const r = range.getBoundingClientRect();
      return { top: r.top, bottom: r.bottom };
    };
    const neighbours = [...bar.querySelectorAll('.jp-StatusBar-TextItem')]
      .filter(el => el.getBoundingClientRect().width > 0 && (el.textContent ?? '').trim() !== '')
      .map(textBox);
    return { ours: textBox(ours), neighbours };
  });
  expect(boxes).not.toBeNull();
  expect(boxes?.neighbours.length ?? 0).toBeGreaterThan(0);
  for (const n of boxes?.neighbours ?? []) {
    expect(Math.abs((boxes?.ours.top ?? 0) - n.top)).toBeLessThanOrEqual(1);
    expect(Math.abs((boxes?.ours.bottom ?? 0) - n.bottom)).toBeLessThanOrEqual(1);
  }

  // At the sidebar's default width, "System 21.6 / 23.5 GiB available" is one line beside its label, and
  // the kernel's resident memory reads with two or three significant digits.
  const host = panel.locator('.jp-GpuMem-host');
  await expect(host).toBeVisible();
  const facts = await host.locator('dd').evaluateAll(items =>
    items.map(dd => {
      const dt = dd.previousElementSibling;
      const range = document.createRange();
      range.selectNodeContents(dd);
      const lines = new Set([...range.getClientRects()].map(r => Math.round(r.top))).size;
      return {
        label: dt?.textContent ?? '',
        text: dd.textContent ?? '',
        lines,
        sameRow: dt !== null && Math.abs(dt.getBoundingClientRect().top - dd.getBoundingClientRect().top) < 2
      };
    })
  );
  await panel.screenshot({ path: testInfo.outputPath('panel.png') });
  const system = facts.find(f => f.label === 'System');
  expect(system?.text).toMatch(/available$/);
  expect(system, JSON.stringify(system)).toMatchObject({ lines: 1, sameRow: true });
  const rss = facts.find(f => f.label === 'Kernel RSS');
  const number = /^([\d.]+) (B|KiB|MiB|GiB)$/.exec(rss?.text ?? '');
  expect(number, rss?.text).not.toBeNull();
  const significant = (number?.[1] ?? '').replace('.', '').replace(/^0+/, '').length;
  expect(significant, rss?.text).toBeGreaterThanOrEqual(2);
});
