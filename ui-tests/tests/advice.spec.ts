/**
 * `%gpumem analyze … --advise` in a real notebook: the analysis output gains "What makes it fit", one row per
 * lever the kernel traced, the recommended row marked with its reason, and each row's command to run it. No GPU
 * here: the traced engine plans for a GTX 1050 (`--target`), which the step of a small MLP at batch 16384 does not
 * fit with room, and some levers make it fit. Each lever is an analysis of its own, hence the long timeout.
 */
import { expect, test } from '@jupyterlab/galata';
import type { ICodeCellModel } from '@jupyterlab/cells';
import type { NotebookPanel } from '@jupyterlab/notebook';
import { openNew } from './notebooks';

const ANALYSIS = 'application/vnd.gpumem.analysis.v1+json';

/** The fields of the payload's `advice` this test compares with the view. */
interface IAdviceFields {
  status: string;
  recommended: number | null;
  rows: Array<{ key: string; command: string; per_rank: boolean }>;
}

test.setTimeout(360000);

test('analyze --advise shows the levers, the recommended one and the commands', async ({ page, tmpPath }) => {
  await openNew(page, `${tmpPath}/advise.ipynb`, [
    [
      'from torch import nn',
      'model = nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(),',
      '                      nn.Linear(4096, 10))'
    ].join('\n'),
    '%gpumem analyze model --batch 16384 --input 1024 --optimizer adamw --target "GTX 1050" --advise'
  ]);
  await page.notebook.runCell(0, true);
  await page.notebook.runCell(1, true);

  const view = page.locator('.jp-GpuMem-analysis');
  await expect(view).toBeVisible({ timeout: 300000 });
  const table = view.locator('.jp-GpuMem-adviceTable');
  await expect(table).toBeVisible();
  await expect(table.locator('caption')).toContainText('What makes it fit');

  const advice = (await page.evaluate(mime => {
    const panel = window.jupyterapp.shell.currentWidget as NotebookPanel;
    const outputs = (panel.content.widgets[1].model as ICodeCellModel).outputs;
    for (let i = 0; i < outputs.length; i++) {
      const data = outputs.get(i).data[mime] as { advice?: unknown } | undefined;
      if (data !== undefined) {
        return data.advice ?? null;
      }
    }
    return null;
  }, ANALYSIS)) as IAdviceFields | null;
  expect(advice).not.toBeNull();
  const { rows, recommended } = advice as IAdviceFields;
  // the step does not fit this GPU with room as analysed, and one of the levers makes it fit
  expect((advice as IAdviceFields).status).not.toBe('fits');
  expect(recommended).not.toBeNull();

  await expect(table.locator('.jp-GpuMem-adviceRow')).toHaveCount(rows.length);
  const marked = table.locator('.jp-GpuMem-adviceRow[data-recommended="true"]');
  await expect(marked).toHaveCount(1);
  await expect(marked).toHaveAttribute('data-key', rows[recommended as number].key);
  await expect(marked.locator('.jp-GpuMem-adviceBadge')).toHaveText('recommended');
  await expect(view.locator('.jp-GpuMem-adviceReason')).toContainText('Recommended:');

  // a sharding row's figures are one GPU's
  await expect(table.locator('.jp-GpuMem-advicePerRank')).toHaveCount(rows.filter(r => r.per_rank).length);

  const commands = table.locator('.jp-GpuMem-adviceCommand');
  await expect(commands).toHaveCount(rows.length);
  await expect(commands.first()).toHaveText(rows[0].command);
  expect(rows[0].command).toContain('%gpumem analyze model');
});
