/**
 * A real PyTorch DataLoader worker killed by SIGKILL (what the kernel's out-of-memory killer sends) during a
 * cell, in a real JupyterLab with a real ipykernel and CPU-only torch. PyTorch's main process raises
 * "DataLoader worker (pid(s) N) exited unexpectedly" from the worker's "… is killed by signal: Killed.": only
 * the cause names the signal, and both the kernel and the browser read it there (or, when the cause is a timed-out
 * fetch, the kernel reads the worker's exit code). The user gets the host checklist (workers first), never the
 * GPU's steps.
 */
import { expect, test } from '@jupyterlab/galata';
import { openNew, openPanel, runFirstCell, stderrText, stepIds } from './notebooks';

/** Each worker kills itself at its first item past the 4th; the kernel (no worker info) never does. */
const CELL = `import os
import signal

import torch
from torch.utils.data import DataLoader, Dataset, get_worker_info


class Items(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        if get_worker_info() is not None and i >= 4:
            os.kill(os.getpid(), signal.SIGKILL)  # as the out-of-memory killer ends a worker
        return i


# batches of plain ints (collate_fn=list): a tensor batch goes through a shared-memory file descriptor, and a
# worker killed while the main process fetches it raises ConnectionResetError instead, a race of its own
loader = DataLoader(Items(), num_workers=2, batch_size=2, collate_fn=list)
for batch in loader:
    pass`;

test('a DataLoader worker killed by SIGKILL gets the host checklist, workers first', async ({
  page,
  tmpPath
}, testInfo) => {
  await openNew(page, `${tmpPath}/workers.ipynb`, [CELL]);
  await openPanel(page);
  await runFirstCell(page);

  // The error as PyTorch raised it. Read over all the cell's stderr outputs together: what reads as one traceback
  // can come as several stderr outputs (a locator on the one with "Traceback" once resolved to two elements and
  // failed in strict mode). Its cause names the signal ("is killed by signal: Killed.") unless the fetch timed out
  // before PyTorch's SIGCHLD handler ran (the signal went to another of the kernel's threads); then the kernel
  // reads the worker's exit code, and the browser takes its checklist's word. Both give what follows.
  const output = page.locator('.jp-Notebook .jp-Cell').first().locator('.jp-OutputArea');
  await expect
    .poll(() => stderrText(output), { timeout: 30000 })
    .toMatch(/RuntimeError: DataLoader worker \(pid\(s\) [\d, ]+\) exited unexpectedly/);

  // The browser recognised it: a notification of the host's family. Read from JupyterLab's notification list, not
  // the toast: the toast closes itself after 20 s, which a loaded machine can spend before this line runs.
  await expect
    .poll(async () => (await page.notifications).map(n => n.message).join('\n'), { timeout: 30000 })
    .toContain('Host RAM out of memory');

  // Inline, under the traceback: the host's checklist, workers first, the GPU's steps folded with why.
  const inline = output.locator('.jp-GpuMem-output .jp-GpuMem-oomChecklist');
  await expect(inline).toBeVisible();
  await expect(inline.locator('.jp-GpuMem-oomFamily')).toHaveText(
    'Host memory (RAM) out of memory, not the GPU'
  );
  await expect(inline.locator('.jp-GpuMem-oomHeadline')).toContainText('the CPU side ran out, not the GPU');
  const shown = inline.locator(':scope > ol.jp-GpuMem-oomSteps > .jp-GpuMem-oomStep');
  const shownIds = await stepIds(shown);
  expect(shownIds.slice(0, 2)).toEqual(['fewer-workers', 'host-memory']);
  expect(shownIds).not.toContain('expandable-segments');
  const workers = shown.first();
  // With the workers' unique memory measured before they died, the step says how many fit ("at most 1"); where
  // the sampler had not read them yet, it halves the 2 the loader asked for. Which comes first is a race.
  await expect(workers.locator('.jp-GpuMem-oomStepTitle')).toHaveText(
    /^Use (fewer DataLoader workers \(2 → 1\)|at most [01] DataLoader workers?)$/
  );
  await expect(workers.locator('.jp-GpuMem-oomStepDetail')).toContainText(
    'pin_memory=True only with RAM to spare'
  );
  await expect(shown.nth(1).locator('.jp-GpuMem-oomStepDetail')).toContainText('memory.max'); // the container's limit
  const expandable = inline.locator(
    'details.jp-GpuMem-oomFolded .jp-GpuMem-oomStep[data-step-id="expandable-segments"]'
  );
  await expect(expandable).toBeHidden();
  await expect(expandable.locator('.jp-GpuMem-oomStepReason')).toHaveText(
    "Not applicable: The host's memory (RAM) ran out, not the GPU's: expandable segments arrange GPU memory only."
  );

  // The GPU Memory panel: the same family and the same first steps, no GPU step.
  const card = page.locator('#jp-GpuMem-panel .jp-GpuMem-oom');
  await expect(card.locator('.jp-GpuMem-sectionHead h3')).toHaveText(
    'Host memory (RAM) out of memory, not the GPU'
  );
  const brief = card.locator('.jp-GpuMem-oomChecklist');
  await expect(brief).toHaveAttribute('data-brief', 'yes');
  await expect
    .poll(async () => (await stepIds(brief.locator('.jp-GpuMem-oomStep')))[0])
    .toBe('fewer-workers');
  expect(await stepIds(brief.locator('.jp-GpuMem-oomStep'))).not.toContain('expandable-segments');
  await page.screenshot({ path: testInfo.outputPath('workers.png') });
});
