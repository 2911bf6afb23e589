import {
  BOOTSTRAP_EXPRESSION,
  interpretBootstrapReply,
  interpretLoadedReply,
  LOADED_EXPRESSION,
  parsePythonStrRepr,
  silentRequest
} from '../bootstrap';

/** An execute_reply content whose user expression evaluated to `text/plain`. */
function ok(text: string): Record<string, unknown> {
  return {
    status: 'ok',
    execution_count: 3,
    user_expressions: { gpumem: { status: 'ok', data: { 'text/plain': text }, metadata: {} } }
  };
}

function failed(ename: string, evalue: string): Record<string, unknown> {
  return {
    status: 'ok',
    execution_count: 3,
    user_expressions: { gpumem: { status: 'error', ename, evalue, traceback: [] } }
  };
}

describe('the silent request', () => {
  it('has no code, no output, no history', () => {
    expect(silentRequest(BOOTSTRAP_EXPRESSION)).toEqual({
      code: '',
      silent: true,
      store_history: false,
      user_expressions: { gpumem: "__import__('gpumem_kernel')._bootstrap()" },
      allow_stdin: false,
      stop_on_error: false
    });
    expect(LOADED_EXPRESSION).toBe("__import__('sys').modules.get('gpumem_kernel') is not None");
  });
});

describe('parsePythonStrRepr', () => {
  it.each([
    [`'{"version": "0.1.0", "protocol": 1}'`, '{"version": "0.1.0", "protocol": 1}'],
    [`"it's"`, "it's"],
    [`'it\\'s'`, "it's"],
    [`'a\\\\b'`, 'a\\b'],
    [`'line\\nnext\\ttab'`, 'line\nnext\ttab'],
    [`'caf\\xe9 \\u2014 \\U0001f600'`, 'café — 😀'],
    [`''`, '']
  ])('%s', (repr, expected) => {
    expect(parsePythonStrRepr(repr)).toBe(expected);
  });

  it.each(['None', '42', "'unterminated", `'a'b'`, `'bad \\q escape'`, `'\\x4'`])('rejects %s', text => {
    expect(parsePythonStrRepr(text)).toBeNull();
  });
});

describe('interpretBootstrapReply', () => {
  it('reads version and protocol', () => {
    expect(interpretBootstrapReply(ok(`'{"version": "0.1.0", "protocol": 1}'`))).toEqual({
      kind: 'ok',
      version: '0.1.0',
      protocol: 1
    });
  });

  it('passes another protocol through (the state machine refuses it)', () => {
    expect(interpretBootstrapReply(ok(`'{"version": "9.0.0", "protocol": 2}'`))).toEqual({
      kind: 'ok',
      version: '9.0.0',
      protocol: 2
    });
  });

  it('recognises the package missing from the kernel environment', () => {
    expect(interpretBootstrapReply(failed('ModuleNotFoundError', "No module named 'gpumem_kernel'"))).toEqual(
      { kind: 'missing', detail: "ModuleNotFoundError: No module named 'gpumem_kernel'" }
    );
  });

  it('reports a missing dependency as an error, not as "not installed"', () => {
    const outcome = interpretBootstrapReply(failed('ModuleNotFoundError', "No module named 'psutil'"));
    expect(outcome).toEqual({
      kind: 'failed',
      message: "loading gpumem_kernel failed: ModuleNotFoundError: No module named 'psutil'"
    });
  });

  it('reports an old package without _bootstrap', () => {
    const outcome = interpretBootstrapReply(
      failed('AttributeError', "module 'gpumem_kernel' has no attribute '_bootstrap'")
    );
    expect(outcome.kind).toBe('failed');
  });

  it.each([`'not json'`, `'{"version": 1, "protocol": 1}'`, `'{"version": "1", "protocol": "1"}'`, 'None'])(
    'rejects a malformed answer %s',
    text => {
      const outcome = interpretBootstrapReply(ok(text));
      expect(outcome.kind).toBe('failed');
      expect(outcome.kind === 'failed' && outcome.message).toContain('unexpected answer');
    }
  );

  it('sees an aborted request', () => {
    expect(interpretBootstrapReply({ status: 'aborted' })).toEqual({ kind: 'aborted' });
    expect(interpretBootstrapReply({ status: 'abort' })).toEqual({ kind: 'aborted' });
  });

  it('fails on a kernel without user expressions', () => {
    expect(interpretBootstrapReply({ status: 'ok', user_expressions: {} }).kind).toBe('failed');
    expect(interpretBootstrapReply(undefined).kind).toBe('failed');
  });
});

describe('interpretLoadedReply', () => {
  it('reads True and False', () => {
    expect(interpretLoadedReply(ok('True'))).toEqual({ kind: 'loaded', loaded: true });
    expect(interpretLoadedReply(ok('False'))).toEqual({ kind: 'loaded', loaded: false });
  });
});
