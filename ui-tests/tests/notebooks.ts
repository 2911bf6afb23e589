/**
 * Shared by the Galata specs: galata's `notebook.createNew` waits for a kernel dialog that does not come
 * for a second notebook in one test, so the specs write a notebook file and open it instead.
 */
import * as path from 'path';
import type { IJupyterLabPageFixture } from '@jupyterlab/galata';

/** Write a Python notebook with one code cell per source (with cell ids), open it and make it current. */
export async function openNew(
  page: IJupyterLabPageFixture,
  filePath: string,
  sources: string[] = ['']
): Promise<void> {
  const nb = {
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
  await page.contents.uploadContent(JSON.stringify(nb), 'text', filePath);
  await page.notebook.openByPath(filePath);
  await page.notebook.activate(path.basename(filePath));
}
