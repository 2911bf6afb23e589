import './base.css';
import './actions.css';
