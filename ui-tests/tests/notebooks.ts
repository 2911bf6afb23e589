/**
 * Shared by the Galata specs: galata's `notebook.createNew` waits for a kernel dialog that does not come
 * for a second notebook in one test, so the specs write a notebook file and open it instead.
 */
import * as path from 'path';
import { expect, type IJupyterLabPageFixture } from '@jupyterlab/galata';
import type { NotebookPanel } from '@jupyterlab/notebook';
import type { APIRequestContext, Locator, Page } from '@playwright/test';

/** A Python notebook with one code cell per source (with cell ids). */
export function notebookJson(sources: string[]): Record<string, unknown> {
  return {
    cells: sources.map((source, i) => ({
      id: `c${i}`,
      cell_type: 'code',
      source,
      metadata: {},
      outputs: [],
      execution_count: null
    })),
    metadata: { kernelspec: { name: 'python3', display_name: 'Python 3 (ipykernel)', language: 'python' } },
    nbformat: 4,
    nbformat_minor: 5
  };
}

/**
 * For the plain-Playwright specs (no Galata fixtures): write that notebook as `name` through the contents API
 * of the server at `base`; true when the server took it.
 */
export async function putNotebook(
  request: APIRequestContext,
  base: string,
  name: string,
  sources: string[]
): Promise<boolean> {
  const put = await request.put(`${base}/api/contents/${name}`, {
    data: { type: 'notebook', format: 'json', content: notebookJson(sources) }
  });
  return put.ok();
}

/**
 * Write a Python notebook with one code cell per source (with cell ids), open it, make it current and wait for
 * its kernel: until the session has a kernel, JupyterLab "runs" a cell by doing nothing (CodeCell.execute
 * returns at once without a kernel), so a run started right after opening could be lost on a loaded machine.
 */
export async function openNew(
  page: IJupyterLabPageFixture,
  filePath: string,
  sources: string[] = ['']
): Promise<void> {
  await page.contents.uploadContent(JSON.stringify(notebookJson(sources)), 'text', filePath);
  await page.notebook.openByPath(filePath);
  await page.notebook.activate(path.basename(filePath));
  await page.evaluate(async () => {
    const panel = window.jupyterapp.shell.currentWidget as NotebookPanel;
    await panel.sessionContext.ready;
    await panel.sessionContext.session?.kernel?.info; // its kernel_info reply: the kernel runs
  });
}

/**
 * The text of every stderr output of an output area (error outputs and stream stderr alike, both rendered as
 * application/vnd.jupyter.stderr), in order, joined by newlines. What a user reads as one traceback can come as
 * several outputs (a stream written by a worker or a warning beside the error output, or a stream cut in two by
 * another output), so a locator on one such output is not strict-mode safe and may pick the wrong one: assert on
 * this text with `expect.poll(() => stderrText(output)).toMatch(...)`, which also waits for outputs that arrive
 * late.
 */
export async function stderrText(outputArea: Locator): Promise<string> {
  const outputs = outputArea.locator('[data-mime-type="application/vnd.jupyter.stderr"]');
  return (await outputs.allTextContents()).join('\n');
}

/** The text/plain result of cell `index` (its execute_result only, never a stream or a warning beside it). */
export function resultOf(page: Page, index: number): Locator {
  return page
    .locator('.jp-Notebook .jp-Cell')
    .nth(index)
    .locator('.jp-OutputArea-executeResult [data-mime-type="text/plain"]');
}

/** Run the first cell only, staying on it (run-all would move the view to the last cell). */
export async function runFirstCell(page: IJupyterLabPageFixture): Promise<void> {
  await page.evaluate(async () => {
    (window.jupyterapp.shell.currentWidget as NotebookPanel).content.activeCellIndex = 0;
    await window.jupyterapp.commands.execute('notebook:run-cell');
  });
}

/** Open the GPU Memory panel and wait until it follows the kernel live. */
export async function openPanel(page: IJupyterLabPageFixture): Promise<void> {
  await page.evaluate(async () => {
    await window.jupyterapp.commands.execute('gpumem:open-panel');
  });
  // The kernel's side answers once the kernel has imported it: slower than expect's default on a loaded machine.
  await expect(page.locator('#jp-GpuMem-panel .jp-GpuMem-root[data-state="live"]')).toBeVisible({
    timeout: 60000
  });
}

/** The step ids of a checklist's list, in the order shown. */
export async function stepIds(list: ReturnType<IJupyterLabPageFixture['locator']>): Promise<string[]> {
  return list.evaluateAll(items => items.map(item => item.getAttribute('data-step-id') ?? ''));
}

/**
 * For the plain-Playwright specs: run cell `index` from the keyboard, selected by its prompt (never its toolbar),
 * then Shift+Enter. A keypress that lands while a cold server's first page still settles can go nowhere (the cell
 * stays "[ ]", seen once in the widget spec): press again until the cell is queued or has run. A queued cell shows
 * "[*]" at once, so a cell is never run twice.
 */
export async function runCellByKeys(page: Page, index: number): Promise<void> {
  const prompt = page.locator('.jp-Notebook .jp-Cell').nth(index).locator('.jp-InputPrompt');
  await expect(async () => {
    await prompt.click();
    await page.keyboard.press('Shift+Enter');
    await expect(prompt).not.toHaveText(/^\[ \]/, { timeout: 5000 });
  }).toPass({ timeout: 60000 });
}
