/**
 * Galata on Debian's Chromium: Playwright's own browser download is not reachable here, so
 * launchOptions points at /usr/bin/chromium (override with CHROMIUM_PATH).
 */
const baseConfig = require('@jupyterlab/galata/lib/playwright-config');

module.exports = {
  ...baseConfig,
  testDir: './tests', // bench/ and compat/ have their own configs
  timeout: 120000,
  expect: { timeout: 20000 },
  retries: process.env.CI ? 1 : 0,
  workers: 1,
  use: {
    ...baseConfig.use,
    launchOptions: {
      executablePath: process.env.CHROMIUM_PATH || '/usr/bin/chromium',
      args: ['--no-sandbox', '--disable-dev-shm-usage']
    },
    trace: 'retain-on-failure',
    video: 'off'
  },
  webServer: {
    command: 'jlpm start',
    url: 'http://localhost:8888/lab',
    timeout: 120 * 1000,
    reuseExistingServer: !process.env.CI
  }
};
