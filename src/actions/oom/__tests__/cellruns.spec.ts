/**
 * @jest-environment node
 *
 * Which cell each execution ran and how it ended, from the execute requests JupyterLab sends (with the cell's
 * id) and the kernel's IOPub: what links an OOM to its cell and tells when that cell later ran without error.
 */
import { CellRuns, type ICellRun, sameCell } from '../cellruns';

function sent(msgId: string, cellId: string | null, silent = false): unknown {
  return {
    direction: 'send',
    msg: {
      header: { msg_type: 'execute_request', msg_id: msgId },
      metadata: cellId === null ? {} : { cellId },
      content: { code: 'x', silent }
    }
  };
}

function iopub(msgType: string, parent: string, content: unknown) {
  return { header: { msg_type: msgType }, parent_header: { msg_id: parent }, content };
}

/** One execution of cell `cellId` as its messages come: request, input, optional error, idle. */
function run(runs: CellRuns, msgId: string, cellId: string | null, count: number, fails: boolean): void {
  runs.sent(sent(msgId, cellId));
  runs.iopub(iopub('status', msgId, { execution_state: 'busy' }));
  runs.iopub(iopub('execute_input', msgId, { code: `cell ${cellId}`, execution_count: count }));
  if (fails) {
    runs.iopub(iopub('error', msgId, { ename: 'OutOfMemoryError', evalue: 'CUDA out of memory.' }));
  }
  runs.iopub(iopub('status', msgId, { execution_state: 'idle' }));
}

describe('CellRuns', () => {
  it('knows the cell and execution count of a request, and whether it ended without error', () => {
    const ended: Array<[ICellRun, boolean]> = [];
    const runs = new CellRuns((r, ok) => ended.push([r, ok]));
    run(runs, 'm1', 'cell-a', 3, true);
    run(runs, 'm2', 'cell-a', 4, false);
    expect(runs.run('m1')).toEqual({ msgId: 'm1', cellId: 'cell-a', code: 'cell cell-a', executionCount: 3 });
    expect(ended.map(([r, ok]) => [r.msgId, r.executionCount, ok])).toEqual([
      ['m1', 3, false],
      ['m2', 4, true]
    ]);
  });

  it('counts neither silent calls (no execute_input) nor a second idle of the same request', () => {
    const ended: string[] = [];
    const runs = new CellRuns(r => ended.push(r.msgId));
    runs.sent(sent('silent', null, true));
    runs.iopub(iopub('status', 'silent', { execution_state: 'idle' }));
    run(runs, 'm1', 'cell-a', 1, false);
    runs.iopub(iopub('status', 'm1', { execution_state: 'idle' }));
    expect(ended).toEqual(['m1']);
    expect(runs.run('silent')).toBeNull();
  });

  it('a run is the same cell by id, else (no id on either) by the same code', () => {
    const of = (cellId: string | null, code: string | null): ICellRun => ({
      msgId: 'm',
      cellId,
      code,
      executionCount: 1
    });
    expect(sameCell(of('a', 'x = 1'), of('a', 'x = 2'))).toBe(true); // the cell, edited
    expect(sameCell(of('a', 'x = 1'), of('b', 'x = 1'))).toBe(false); // another cell with the same code
    expect(sameCell(of(null, 'x = 1'), of(null, 'x = 1'))).toBe(true);
    expect(sameCell(of(null, 'x = 1'), of(null, 'x = 2'))).toBe(false);
    expect(sameCell(of('a', 'x = 1'), of(null, 'x = 1'))).toBe(false);
  });
});
