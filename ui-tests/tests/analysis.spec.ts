/**
 * `%gpumem analyze` and `%gpumem benchmark` outputs in a real notebook: the rich renderers show the
 * breakdown, the cards and the charts, and "Copy as YAML" yields YAML that parses back to the same numbers
 * as the output's JSON. No GPU here: the analysis is the traced engine planning for an RTX 4080 Super and
 * the benchmark runs on the CPU against a simulated 64 MiB memory cap (labelled "simulated").
 */
import { expect, IJupyterLabPageFixture, test } from '@jupyterlab/galata';
import type { ICodeCellModel } from '@jupyterlab/cells';
import type { NotebookPanel } from '@jupyterlab/notebook';
import { openNew } from './notebooks';
import { parse } from 'yaml';

const ANALYSIS = 'application/vnd.gpumem.analysis.v1+json';

/** The fields of the analysis payload this test compares with the YAML. */
interface IAnalysisFields {
  engine: string;
  recommendations: { recommended: number | null };
}

/** The JSON the kernel wrote into a cell's first output carrying `mime`. */
async function outputData<T>(page: IJupyterLabPageFixture, cell: number, mime: string): Promise<T> {
  const data = await page.evaluate(
    ([index, type]) => {
      const panel = window.jupyterapp.shell.currentWidget as NotebookPanel;
      const outputs = (panel.content.widgets[index].model as ICodeCellModel).outputs;
      for (let i = 0; i < outputs.length; i++) {
        const data = outputs.get(i).data;
        if (data[type] !== undefined) {
          return data[type];
        }
      }
      return null;
    },
    [cell, mime] as [number, string]
  );
  return data as T;
}

test('analyze renders the breakdown, the picks and YAML that parses back', async ({
  page,
  tmpPath,
  context
}) => {
  await context.grantPermissions(['clipboard-read', 'clipboard-write']);
  await openNew(page, `${tmpPath}/analyze.ipynb`);
  await page.notebook.setCell(
    0,
    'code',
    [
      'import torch',
      'from torch import nn',
      'model = nn.Sequential(nn.Conv2d(3, 64, 3, padding=1), nn.ReLU(), nn.Conv2d(64, 64, 3, padding=1),',
      '                      nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))'
    ].join('\n')
  );
  await page.notebook.run();
  await page.notebook.addCell(
    'code',
    '%gpumem analyze model --batch 32 --input 3x224x224 --target "RTX 4080 Super" --amp bf16 --optimizer adamw'
  );
  await page.notebook.runCell(1, true);

  const view = page.locator('.jp-GpuMem-analysis');
  await expect(view).toBeVisible({ timeout: 60000 });
  await expect(view.locator('.jp-GpuMem-breakdown')).toContainText('Parameters');
  await expect(view.locator('.jp-GpuMem-cards')).toContainText('Recommended');
  await expect(view.locator('.jp-GpuMem-analysisChart svg.jp-GpuMem-chartSvg')).toBeVisible();

  const payload = await outputData<IAnalysisFields>(page, 1, ANALYSIS);
  expect(payload.engine).toBe('traced');
  const button = view.locator('.jp-GpuMem-copyYaml').first();
  const yamlText = (await button.getAttribute('data-yaml')) as string;
  const config = parse(yamlText);
  expect(config.data.batch_size).toBe(payload.recommendations.recommended);
  expect(config.training.use_amp).toBe(true);

  await button.click();
  await expect(button).toHaveText('Copied');
  await expect
    .poll(async () => parse(await page.evaluate(() => navigator.clipboard.readText())))
    .toEqual(config);
});

test('benchmark renders its table, picks and chart', async ({ page, tmpPath }) => {
  await openNew(page, `${tmpPath}/bench.ipynb`);
  await page.notebook.setCell(
    0,
    'code',
    [
      'import torch',
      'from torch import nn',
      'net = nn.Sequential(nn.Flatten(), nn.Linear(3 * 16 * 16, 64), nn.ReLU(), nn.Linear(64, 10))'
    ].join('\n')
  );
  await page.notebook.run();
  await page.notebook.addCell(
    'code',
    '%gpumem benchmark net --synthetic 3x16x16 --classes 10 --batch-sizes 8,16,32 --num-workers 0 --steps 3 --warmup 1 --simulate 64MiB'
  );
  await page.notebook.runCell(1, true);

  const view = page.locator('.jp-GpuMem-benchmark');
  await expect(view).toBeVisible({ timeout: 90000 });
  await expect(view).toContainText('simulated');
  await expect(view.locator('table')).toContainText('32');
  await expect(view.locator('.jp-GpuMem-pickCard').first()).toBeVisible();
  await expect(view.locator('.jp-GpuMem-benchmarkChart svg.jp-GpuMem-chartSvg')).toBeVisible();
});
