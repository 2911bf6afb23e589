/** The newest-JupyterLab check (compat/): plain Playwright on Debian's Chromium; scripts/test.sh starts the server. */
module.exports = {
  testDir: './compat',
  timeout: 120000,
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
