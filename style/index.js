import './chart.css';
import './base.css';
import './bar.css';
import './actions.css';
import './analysis.css';
import './lifecycle.css';
import './timeline.css';
import './growth.css';
