/**
 * The newest-JupyterLab check (compat/): plain Playwright on Debian's Chromium; scripts/test.sh starts the server.
 * scripts/test.sh runs this check and the Notebook 7 and watch checks (which share this set-up) side by side on
 * two cores: an expectation waits up to 20 s, as in the Galata tests, not Playwright's default 5 s.
 */
module.exports = {
  testDir: './compat',
  timeout: 120000,
  expect: { timeout: 20000 },
  retries: process.env.CI ? 1 : 0,
  workers: 1,
  use: {
    launchOptions: {
      executablePath: process.env.CHROMIUM_PATH || '/usr/bin/chromium',
      args: ['--no-sandbox', '--disable-dev-shm-usage']
    },
    trace: 'retain-on-failure',
    video: 'off'
  }
};
