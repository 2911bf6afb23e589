/**
 * The memory timeline output in a real notebook and kernel, in the light and the dark theme: a payload made
 * by the jest fixture generator (src/outputs/timeline/__tests__/makepayload.ts) displayed with
 * `IPython.display.display(..., raw=True)` renders; hovering a band shows its tooltip, clicking it its stack;
 * the wheel zooms and a drag pans; a download the kernel cannot serve (it never held that id) says so in one
 * line and the CSV of what is shown downloads. Then a real `%gpumem analyze … --timeline` (the predicted
 * step) renders, names the model's forward by its cell ("In [1], line 9, in forward") and its snapshot and CSV
 * download from the kernel. Screenshots go to the test output.
 */
import * as fs from 'fs';
import { expect, type IJupyterLabPageFixture, test } from '@jupyterlab/galata';
import { openNew } from './notebooks';
import { makePayload } from '../../src/outputs/timeline/__tests__/makepayload';

const MIME = 'application/vnd.gpumem.timeline.v1+json';

async function showPayload(page: IJupyterLabPageFixture, tmpPath: string, name: string): Promise<void> {
  const payload = makePayload({
    layers: 12,
    smallPerLayer: 2,
    source: 'recorded',
    baseline: 256 * 1024 * 1024,
    failed: true,
    notes: ['events before the recording began are in the baseline']
  });
  await page.contents.uploadContent(JSON.stringify(payload), 'text', `${tmpPath}/${name}.json`);
  await openNew(page, `${tmpPath}/${name}.ipynb`, [
    [
      'import json',
      'from IPython.display import display',
      `display({'${MIME}': json.load(open('${name}.json'))}, raw=True)`
    ].join('\n')
  ]);
  await page.notebook.runCell(0, true);
}

for (const theme of ['light', 'dark'] as const) {
  test(`a timeline renders, hovers, selects, zooms and downloads what is shown (${theme})`, async ({
    page,
    tmpPath
  }, testInfo) => {
    await showPayload(page, tmpPath, `timeline-${theme}`);
    const view = page.locator('.jp-GpuMem-timeline');
    await expect(view).toBeVisible({ timeout: 60000 });
    if (theme === 'dark') {
      await page.theme.setDarkTheme();
    } else {
      await page.theme.setLightTheme();
    }
    await expect(page.locator('body')).toHaveAttribute('data-jp-theme-light', String(theme === 'light'));
    await expect(view.locator('.jp-GpuMem-richBadge')).toHaveText('recorded');
    await expect(view.locator('polygon.jp-GpuMem-tlBand')).toHaveCount(12 * 6 + 1);
    await expect(view.locator('.jp-GpuMem-tlPeak text')).toContainText('peak');
    await expect(view.locator('.jp-GpuMem-tlFailed')).toContainText('The allocation that failed: 20.0 GiB');

    // A point on the largest band (the first whose box's centre is on it, largest first): hover, then click.
    const spot = await view.evaluate(svg => {
      const bands = [...svg.querySelectorAll('polygon.jp-GpuMem-tlBand')].map(p => ({
        p,
        box: p.getBoundingClientRect()
      }));
      bands.sort((a, b) => b.box.height * b.box.width - a.box.height * a.box.width);
      for (const { p, box } of bands) {
        const [x, y] = [box.left + box.width / 2, box.top + box.height / 2];
        if (document.elementFromPoint(x, y) === p) {
          return { x, y, band: p.getAttribute('data-band') ?? '', label: p.getAttribute('aria-label') ?? '' };
        }
      }
      return null;
    });
    expect(spot).not.toBeNull();
    const { x, y, band, label } = spot!;
    const category = label.split(' of ')[1].split(',')[0];
    const source = label.split(', ').slice(1).join(', ');
    await page.mouse.move(x, y);
    const tip = view.locator('.jp-GpuMem-tlTooltip');
    await expect(tip).toBeVisible();
    await expect(tip).toContainText(category);
    await expect(tip).toContainText(source);
    await page.mouse.click(x, y);
    await expect(view.locator('.jp-GpuMem-tlSelected')).toHaveAttribute('data-selected', band);
    const stack = view.locator('.jp-GpuMem-tlStack');
    await expect(stack.locator('li.jp-GpuMem-tlFrame-user').first()).toHaveText(source);
    await expect(stack.locator('.jp-GpuMem-richSectionTitle')).toContainText(category);
    await page.mouse.move(0, 0);
    await expect(tip).toBeHidden();
    await view.screenshot({ path: testInfo.outputPath(`timeline-${theme}.png`) });

    // Wheel zooms around the pointer; a drag pans; "Reset zoom" shows it all again.
    const svg = view.locator('svg.jp-GpuMem-tlSvg');
    const box = (await svg.boundingBox())!;
    await page.mouse.move(box.x + box.width / 2, box.y + box.height / 2);
    await page.mouse.wheel(0, -400);
    await expect(svg).not.toHaveAttribute('data-lo', '0.0');
    const lo = Number(await svg.getAttribute('data-lo'));
    await page.mouse.down();
    await page.mouse.move(box.x + box.width / 2 + 120, box.y + box.height / 2, { steps: 6 });
    await page.mouse.up();
    await expect.poll(async () => Number(await svg.getAttribute('data-lo'))).toBeLessThan(lo);
    await view.locator('.jp-GpuMem-tlReset').click();
    await expect(svg).toHaveAttribute('data-lo', '0.0');

    // This kernel never held the fixture's id: one line, and the CSV of what is shown instead.
    await view.locator('[data-format="snapshot"]').click();
    const problem = view.locator('.jp-GpuMem-tlExportProblem');
    await expect(problem).toBeVisible({ timeout: 30000 });
    expect((await problem.textContent())!.split('\n')).toHaveLength(1);
    const [download] = await Promise.all([
      page.waitForEvent('download'),
      view.locator('.jp-GpuMem-tlDownloadShown').click()
    ]);
    expect(download.suggestedFilename()).toBe('gpumem-timeline-tl-0123456789abcdef-shown.csv');
    const saved = testInfo.outputPath(`shown-${theme}.csv`);
    await download.saveAs(saved);
    const text = fs.readFileSync(saved, 'utf8');
    expect(text.split('\r\n')[0]).toBe(
      'kind,size_bytes,category,start_event,end_event,source,function,file,line'
    );
    await view.screenshot({ path: testInfo.outputPath(`timeline-${theme}-export-problem.png`) });
  });
}

test('%gpumem analyze --timeline renders the predicted step and downloads its snapshot and CSV', async ({
  page,
  tmpPath
}, testInfo) => {
  await openNew(page, `${tmpPath}/predicted.ipynb`, [
    [
      'import torch',
      'from torch import nn',
      'class Net(nn.Module):',
      '    def __init__(self):',
      '        super().__init__()',
      '        self.body = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU())',
      '        self.head = nn.Linear(512, 10)',
      '    def forward(self, x):',
      '        return self.head(self.body(x))',
      'model = Net()'
    ].join('\n'),
    '%gpumem analyze model -b 32 --input 256 --target "RTX 4080 Super" --optimizer adamw --timeline'
  ]);
  await page.notebook.runCell(0, true);
  await page.notebook.runCell(1, true);
  const view = page.locator('.jp-GpuMem-timeline');
  await expect(view).toBeVisible({ timeout: 90000 });
  await expect(view.locator('.jp-GpuMem-richBadge')).toHaveText('predicted');
  expect(await view.locator('polygon.jp-GpuMem-tlBand').count()).toBeGreaterThan(3);
  // What is alive at the peak sums to it; a row selected shows its stack.
  await expect(view.locator('.jp-GpuMem-tlTable tfoot')).toContainText('100.0%');
  // The model's forward, defined in the first cell, is named by that cell's number as its prompt shows it.
  const prompt = (await page.notebook.getCellLocator(0))!.locator('.jp-InputPrompt');
  const count = /\[(\d+)\]/.exec((await prompt.textContent()) ?? '')?.[1];
  expect(count).toBeTruthy();
  await expect(view.locator('.jp-GpuMem-tlTable tbody')).toContainText(
    new RegExp(`In \\[${count}\\], line 9, in forward`)
  );
  await view.locator('.jp-GpuMem-tlTable tbody tr').first().click();
  await expect(view.locator('.jp-GpuMem-tlStack')).toBeVisible();
  await view.screenshot({ path: testInfo.outputPath('timeline-predicted.png') });
  for (const [format, ext] of [
    ['snapshot', '.pickle'],
    ['csv', '.csv']
  ] as const) {
    const [download] = await Promise.all([
      page.waitForEvent('download', { timeout: 60000 }),
      view.locator(`[data-format="${format}"]`).click()
    ]);
    expect(download.suggestedFilename().endsWith(ext)).toBe(true);
    const saved = testInfo.outputPath(`predicted${ext}`);
    await download.saveAs(saved);
    expect(fs.statSync(saved).size).toBeGreaterThan(0);
  }
  await expect(view.locator('.jp-GpuMem-tlExportProblem')).toHaveCount(0);
});
