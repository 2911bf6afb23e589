/**
 * The timeline's downloads through a bridge: the kernel's file, and one line for each way it cannot come.
 */
import { Signal } from '@lumino/signaling';

import { RequestError } from '../../channel/requests';
import { exportTimelineFile } from '../timelineexport';
import { untranslated } from '../../ui/i18n';
import type { IBridgeView } from '../../tokens';
import type { IHello } from '../../wire/protocol';

const HELLO = {
  type: 'hello',
  protocol: 1,
  version: '0.1.0',
  pid: 1,
  capabilities: ['snapshot', 'timeline'],
  interval: 1,
  history_seconds: 600,
  python: '3.11',
  ipykernel: '7.0',
  torch: null
} as IHello;

const FILE = {
  id: 'tl-0123456789abcdef',
  format: 'csv' as const,
  filename: 'gpumem-timeline-tl-0123456789abcdef.csv',
  media_type: 'text/csv',
  data: 'YQ==',
  bytes: 1
};

function bridge(hello: IHello | null, answer: () => Promise<unknown>, asked: unknown[] = []): IBridgeView {
  return {
    hello,
    latest: null,
    dataChanged: new Signal<unknown, void>({}),
    request: ((action: string, args: unknown, timeout: number) => {
      asked.push([action, args, timeout]);
      return answer();
    }) as IBridgeView['request']
  };
}

describe('exportTimelineFile', () => {
  it('asks the kernel for the file', async () => {
    const asked: unknown[] = [];
    const file = await exportTimelineFile(
      bridge(HELLO, () => Promise.resolve(FILE), asked),
      FILE.id,
      'csv',
      untranslated
    );
    expect(file).toEqual(FILE);
    expect(asked).toEqual([['timeline_export', { id: FILE.id, format: 'csv' }, 60000]]);
  });

  it.each([
    ['no bridge', null, /^No kernel is connected to this notebook/],
    ['no hello yet', bridge(null, () => Promise.resolve(FILE)), /^No kernel is connected to this notebook/],
    [
      'an older kernel package',
      bridge({ ...HELLO, capabilities: ['snapshot'] }, () => Promise.resolve(FILE)),
      /^This kernel's gpumem_kernel 0\.1\.0 cannot export timelines/
    ],
    [
      'an id the kernel no longer holds',
      bridge(HELLO, () =>
        Promise.reject(
          new RequestError(
            'bad-request',
            'this kernel no longer holds timeline tl-0123456789abcdef; re-run the cell'
          )
        )
      ),
      /^this kernel no longer holds timeline tl-0123456789abcdef; re-run the cell$/
    ],
    [
      'a restart meanwhile',
      bridge(HELLO, () => Promise.reject(new RequestError('disconnected', 'the kernel restarted'))),
      /^The kernel restarted or disconnected/
    ],
    [
      'no answer',
      bridge(HELLO, () => Promise.reject(new RequestError('timeout', 'x'))),
      /^The kernel did not answer within 60 s/
    ]
  ])('%s: one line', async (_, b, line) => {
    const error: Error = await exportTimelineFile(b, FILE.id, 'snapshot', untranslated).then(
      () => new Error('resolved'),
      (e: Error) => e
    );
    expect(error.message).toMatch(line);
    expect(error.message).not.toContain('\n');
  });
});
