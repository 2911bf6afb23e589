/**
 * Charts and figures that do not mislead, in a real browser: the analysis chart's batch-size ticks are whole
 * numbers, each once, with the maximum on its own tick; the benchmark's summary fits its output (no
 * scrollbar hiding Samples/s); the status item on this machine, which has no NVIDIA driver, shows the
 * kernel's RAM; and with the tests' NVML double (tests/fake_nvml.py) the panel's sample chart prints its
 * labels at a readable size and opens full size in the main area.
 */
import * as fs from 'fs';
import * as path from 'path';
import { expect, type IJupyterLabPageFixture, test } from '@jupyterlab/galata';
import { openNew } from './notebooks';

const FIXTURES = path.resolve(__dirname, '..', '..', 'src', '__tests__', 'fixtures');
const TESTS_DIR = path.resolve(__dirname, '..', '..', 'tests');

test.use({ viewport: { width: 1400, height: 900 } });

/** Display a renderer fixture (src/__tests__/fixtures) in a new notebook, under its MIME type. */
async function showFixture(
  page: IJupyterLabPageFixture,
  tmpPath: string,
  fixture: string,
  mime: string
): Promise<void> {
  const payload = fs.readFileSync(path.join(FIXTURES, `${fixture}.json`), 'utf8');
  await page.contents.uploadContent(payload, 'text', `${tmpPath}/${fixture}.json`);
  await openNew(page, `${tmpPath}/${fixture}.ipynb`, [
    [
      'import json',
      'from IPython.display import display',
      `display({'${mime}': json.load(open('${fixture}.json'))}, raw=True)`
    ].join('\n')
  ]);
  await page.notebook.runCell(0, true);
}

test('the analysis chart ticks whole batch sizes, each once, the maximum on its own', async ({
  page,
  tmpPath
}) => {
  await showFixture(page, tmpPath, 'analysis_accum', 'application/vnd.gpumem.analysis.v1+json');
  const chart = page.locator('.jp-GpuMem-analysisChart svg.jp-GpuMem-chartSvg');
  await expect(chart).toBeVisible({ timeout: 60000 });
  const ticks = await chart.evaluate(svg =>
    [...svg.querySelectorAll('line.jp-GpuMem-chartTick')].map(line => ({
      x: Number(line.getAttribute('x1')),
      label: line.parentElement?.querySelector('text')?.textContent ?? ''
    }))
  );
  const labels = ticks.map(t => t.label).filter(l => l !== '');
  expect(labels.length).toBeGreaterThanOrEqual(3);
  for (const label of labels) {
    expect(label).toMatch(/^[\d,]+$/);
  }
  expect(new Set(labels).size).toBe(labels.length);
  const maximum = ticks.find(t => t.label === '231');
  expect(maximum).toBeDefined();
  const markerX = await chart.locator('.jp-GpuMem-chartMarker[data-kind="maximum"]').getAttribute('data-x');
  expect(Number(markerX)).toBeCloseTo(maximum?.x ?? NaN, 1);
});

test('the benchmark summary fits its output: Samples/s is in view without scrolling', async ({
  page,
  tmpPath
}) => {
  await page.setViewportSize({ width: 1100, height: 900 });
  await showFixture(page, tmpPath, 'benchmark_simulated', 'application/vnd.gpumem.benchmark.v1+json');
  const table = page.locator('.jp-GpuMem-benchmarkTable');
  await expect(table).toBeVisible({ timeout: 60000 });
  const fit = await table.evaluate(node => {
    const output = node.closest('.jp-OutputArea-output') as HTMLElement;
    const head = [...node.querySelectorAll('thead th')].find(
      th => th.textContent === 'Samples/s'
    ) as HTMLElement;
    return {
      outputRight: output.getBoundingClientRect().right,
      headRight: head.getBoundingClientRect().right,
      scrolls: output.scrollWidth > output.clientWidth + 1
    };
  });
  expect(fit.scrolls).toBe(false);
  expect(fit.headRight).toBeLessThanOrEqual(fit.outputRight);
});

test("the status item without a GPU shows the kernel's RAM", async ({ page, tmpPath }) => {
  await openNew(page, `${tmpPath}/cpu.ipynb`);
  await page.evaluate(async () => {
    await window.jupyterapp.commands.execute('gpumem:open-panel');
  });
  await expect(page.locator('#jp-GpuMem-panel .jp-GpuMem-root[data-state="live"]')).toBeVisible();
  const item = page.locator('.jp-GpuMem-statusItem');
  await expect(item).toHaveText(/^GPU: none · RAM \d+(\.\d)? \/ \d+(\.\d)? [KMGT]iB$/);
  await expect(item).toHaveAttribute(
    'title',
    /Kernel RSS .+ of the (container's .+ memory limit|machine's .+)/
  );
});

test('the panel sample chart prints readable labels and opens full size, live', async ({ page, tmpPath }) => {
  await openNew(page, `${tmpPath}/gpu.ipynb`);
  await page.evaluate(async () => {
    await window.jupyterapp.commands.execute('gpumem:open-panel');
  });
  const panel = page.locator('#jp-GpuMem-panel');
  await expect(panel.locator('.jp-GpuMem-root[data-state="live"]')).toBeVisible();
  const code = [
    'import sys',
    `sys.path.insert(0, ${JSON.stringify(TESTS_DIR)})`,
    'from fake_nvml import FakeGpu, GiB, install_in_running_kernel',
    'install_in_running_kernel([FakeGpu(name="NVIDIA A100", uuid="GPU-11111111-2222-3333-4444-555555555555",',
    '                                   total=16 * GiB, used=6 * GiB)])'
  ].join('\n');
  await page.notebook.setCell(0, 'code', code);
  await page.notebook.run();

  const chart = panel.locator('.jp-GpuMem-sampleChart svg.jp-GpuMem-chartSvg');
  await expect(chart).toBeVisible({ timeout: 60000 });
  const sizes = await chart.evaluate(svg =>
    [...svg.querySelectorAll('text.jp-GpuMem-chartAxis')].map(t => t.getBoundingClientRect().height)
  );
  expect(sizes.length).toBeGreaterThan(0);
  for (const height of sizes) {
    expect(height).toBeGreaterThanOrEqual(9); // the box of ~11 px text; the old drawing printed ~7 px
  }
  // No allocator lines without torch in the kernel: the legend lists NVML's "device used" alone.
  await expect(panel.locator('.jp-GpuMem-sampleChart .jp-GpuMem-chartLegendItem').first()).toHaveText(
    'device used'
  );
  await expect(
    panel.locator('.jp-GpuMem-sampleChart .jp-GpuMem-chartLegendItem', { hasText: 'reserved' })
  ).toHaveCount(0);

  await panel.locator('button.jp-GpuMem-openFull').click();
  const tab = page.locator('#jp-GpuMem-sampleChart-main');
  await expect(tab).toBeVisible();
  await expect(tab.locator('.jp-GpuMem-chartCaption')).toContainText('cuda:0');
  const full = tab.locator('svg.jp-GpuMem-chartSvg');
  await expect(full).toBeVisible();
  const box = await full.boundingBox();
  expect(box?.width ?? 0).toBeGreaterThan(600);
  const before = await tab.locator('polyline.jp-GpuMem-line-used').getAttribute('points');
  await expect
    .poll(async () => tab.locator('polyline.jp-GpuMem-line-used').getAttribute('points'), { timeout: 20000 })
    .not.toBe(before); // new samples redraw it
});
