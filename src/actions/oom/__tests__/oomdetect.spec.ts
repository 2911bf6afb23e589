/**
 * @jest-environment node
 *
 * Recognising a GPU out-of-memory error on IOPub: PyTorch 2.x's OutOfMemoryError, 1.x's RuntimeError, CUDA
 * errors outside the allocator, other backends — and leaving every other error alone.
 */
import { isOomError, type IIopubLike, oomCauseOf, oomErrorOf, oomFamily, oomText } from '../detect';
import killedWorker from './data/dataloader_killed_error.json';

const V2 =
  'CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 15.70 GiB of which 1.10 GiB is free. ' +
  'Including non-PyTorch memory, this process has 14.58 GiB memory in use. Of the allocated memory 13.90 GiB is ' +
  'allocated by PyTorch, and 412.00 MiB is reserved by PyTorch but unallocated.';
const V1 =
  'CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 5.80 GiB total capacity; 4.10 GiB already allocated; ' +
  '10.00 MiB free; 4.20 GiB reserved in total by PyTorch)';

function error(ename: string, evalue: string, parent = 'cell-1'): IIopubLike {
  return {
    header: { msg_type: 'error' },
    parent_header: { msg_id: parent },
    content: { ename, evalue, traceback: [] }
  };
}

describe('isOomError', () => {
  it.each<[string, string, string]>([
    ['torch.OutOfMemoryError (2.x)', 'OutOfMemoryError', V2],
    ['torch.cuda.OutOfMemoryError with an empty message', 'OutOfMemoryError', ''],
    ['a qualified name', 'torch.cuda.OutOfMemoryError', 'x'],
    ['RuntimeError of PyTorch 1.x', 'RuntimeError', V1],
    ['1.x wording without numbers', 'RuntimeError', 'CUDA out of memory.'],
    [
      'a CUDA call outside the allocator',
      'RuntimeError',
      'CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported'
    ],
    ['a ROCm build', 'OutOfMemoryError', 'HIP out of memory. Tried to allocate 1.00 GiB'],
    ['a ROCm build as RuntimeError', 'RuntimeError', 'HIP out of memory. Tried to allocate 1.00 GiB'],
    ['an XPU build', 'RuntimeError', 'XPU out of memory. Tried to allocate 1.00 GiB'],
    [
      'PyTorch 0.x',
      'RuntimeError',
      'cuda runtime error (2) : out of memory at /pytorch/aten/src/THC/THCCachingAllocator.cpp:510'
    ],
    ['a library that re-raises it', 'AcceleratorError', `wrapped: ${V2}`],
    ['a host MemoryError', 'MemoryError', ''],
    [
      'numpy on the host',
      '_ArrayMemoryError',
      'Unable to allocate 3.00 GiB for an array with shape (1024, 1024, 384)'
    ],
    ['TensorFlow by name', 'ResourceExhaustedError', 'anything'],
    [
      'vLLM',
      'ValueError',
      'No available memory for the cache blocks. Try increasing `gpu_memory_utilization`'
    ]
  ])('%s', (_, ename, evalue) => {
    expect(isOomError(ename, evalue)).toBe(true);
  });

  it.each<[string, string, string]>([
    ['a device-side assert', 'RuntimeError', 'CUDA error: device-side assert triggered'],
    ['a shape error', 'RuntimeError', 'mat1 and mat2 shapes cannot be multiplied (64x512 and 256x10)'],
    ['a ValueError that mentions memory', 'ValueError', 'out of memory budget'],
    ['lower-case wording', 'RuntimeError', 'cuda out of memory'],
    [
      'prose that mentions the error',
      'RuntimeError',
      'if you encounter CUDA out of memory, reduce the batch size'
    ],
    [
      'a DataLoader worker ended by SIGTERM',
      'RuntimeError',
      'DataLoader worker (pid 7) is killed by signal: Terminated.'
    ],
    ['a name that only contains the word', 'NotAnOutOfMemoryErrorReally', 'x'],
    ['an interrupt', 'KeyboardInterrupt', '']
  ])('ignores %s', (_, ename, evalue) => {
    expect(isOomError(ename, evalue)).toBe(false);
  });
});

describe('oomFamily', () => {
  it('names the family, as the kernel does', () => {
    expect(oomFamily('OutOfMemoryError', V2)).toBe('cuda_allocator');
    expect(oomFamily('RuntimeError', 'CUDA error: out of memory')).toBe('driver');
    expect(
      oomFamily('RuntimeError', 'CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`')
    ).toBe('cublas');
    expect(oomFamily('RuntimeError', 'cuDNN error: CUDNN_STATUS_ALLOC_FAILED')).toBe('cudnn');
    expect(oomFamily('OutOfMemoryError', 'Allocation on device ')).toBe('cuda_allocator');
    expect(oomFamily('OutOfMemoryError', 'MPS backend out of memory (MPS allocated: 1 GB)')).toBe('mps');
    expect(oomFamily('OutOfMemoryError', 'XPU out of memory. Tried to allocate 1.00 GiB')).toBe('xpu');
    expect(oomFamily('RuntimeError', 'cuDNN error: CUDNN_STATUS_INTERNAL_ERROR')).toBeNull();
  });

  it('goes by the earliest message when a value holds several', () => {
    const chained = `CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling \`cublasCreate(handle)\`\n${V1}`;
    expect(oomFamily('RuntimeError', chained)).toBe('cublas');
    expect(oomFamily('RuntimeError', `${V1}\nCUDA error: CUBLAS_STATUS_ALLOC_FAILED`)).toBe('cuda_allocator');
  });

  it('lets the exception name decide over text the application added', () => {
    const hint = 'if you encounter CUDA out of memory, reduce the batch size';
    expect(
      oomFamily('MemoryError', `${hint}\nUnable to allocate 2.00 GiB for an array with shape (2, 2)`)
    ).toBe('host');
    expect(oomFamily('MemoryError', `${V1}`)).toBe('host');
    expect(oomFamily('RuntimeError', `DataLoader worker (pid 12) is killed by signal: Killed. ${hint}`)).toBe(
      'host'
    );
  });
});

describe('oomErrorOf', () => {
  it('keeps the failing request id', () => {
    expect(oomErrorOf(error('OutOfMemoryError', V2, 'abc-1'))).toEqual({
      ename: 'OutOfMemoryError',
      evalue: V2,
      parentId: 'abc-1'
    });
  });

  it('ignores other message types and malformed content', () => {
    expect(
      oomErrorOf({ header: { msg_type: 'stream' }, parent_header: {}, content: { text: V2 } })
    ).toBeNull();
    expect(
      oomErrorOf({ header: { msg_type: 'error' }, parent_header: {}, content: { ename: 3, evalue: V2 } })
    ).toBeNull();
    expect(oomErrorOf({ header: { msg_type: 'error' }, parent_header: {}, content: null })).toBeNull();
    expect(oomErrorOf(error('ZeroDivisionError', 'division by zero'))).toBeNull();
  });

  it('has no parent id when the header has none', () => {
    expect(oomErrorOf({ ...error('OutOfMemoryError', V2), parent_header: {} })?.parentId).toBeNull();
  });

  it('gives the text the kernel parses', () => {
    expect(oomText({ ename: 'RuntimeError', evalue: V1, parentId: null })).toBe(`RuntimeError: ${V1}`);
    expect(oomText({ ename: 'OutOfMemoryError', evalue: '', parentId: null })).toBe('OutOfMemoryError');
  });
});

/**
 * data/dataloader_killed_error.json: the IOPub error content a real ipykernel (CPU-only torch 2.13) sent when a
 * DataLoader worker sent itself SIGKILL: "exited unexpectedly", raised from "is killed by signal: Killed.".
 */
describe('an error raised from an out-of-memory error', () => {
  const KILLED = 'DataLoader worker (pid 25725) is killed by signal: Killed.';
  const withTraceback = (traceback: string[]): IIopubLike => ({
    header: { msg_type: 'error' },
    parent_header: { msg_id: 'cell-9' },
    content: { ename: killedWorker.ename, evalue: killedWorker.evalue, traceback }
  });

  it("is the cause's out-of-memory error, read from the traceback", () => {
    expect(isOomError(killedWorker.ename, killedWorker.evalue)).toBe(false); // names no signal by itself
    const error = oomErrorOf(withTraceback(killedWorker.traceback));
    expect(error).toEqual({ ename: 'RuntimeError', evalue: KILLED, parentId: 'cell-9' });
    expect(oomFamily(error!.ename, error!.evalue)).toBe('host');
    expect(oomText(error!)).toBe(`RuntimeError: ${KILLED}`);
  });

  it('is not when the cause is another signal, or the error was only raised while handling one', () => {
    const terminated = killedWorker.traceback.map(line => line.replace('Killed.', 'Terminated.'));
    expect(oomErrorOf(withTraceback(terminated))).toBeNull();
    const handling = killedWorker.traceback.map(line =>
      line.replace(
        'The above exception was the direct cause of the following exception:',
        'During handling of the above exception, another exception occurred:'
      )
    );
    expect(oomErrorOf(withTraceback(handling))).toBeNull();
    expect(oomCauseOf(undefined)).toBeNull();
    expect(oomCauseOf(['RuntimeError: x', 3])).toBeNull();
  });

  it('follows direct causes only, nearest first', () => {
    const cause = 'The above exception was the direct cause of the following exception:';
    const handling = 'During handling of the above exception, another exception occurred:';
    const chain = (...parts: string[]) => parts.join('\n\n').split('\n');
    expect(
      oomCauseOf(chain(`MemoryError: ${V1}`, cause, 'ValueError: wrapped', cause, 'KeyError: x'))
    ).toEqual({
      ename: 'MemoryError',
      evalue: V1
    });
    expect(
      oomCauseOf(chain(`MemoryError: ${V1}`, handling, 'ValueError: wrapped', cause, 'KeyError: x'))
    ).toBeNull();
  });
});
