import { Fragment } from 'preact';
import { AlertRulesPage } from './components/AlertRules';
import { AlertDetailPage, AlertsPage } from './components/Alerts';
import { FleetPage } from './components/Fleet';
import { NodePage } from './components/NodePage';
import { Shell } from './components/Shell';
import { alertsHref, fleetHref, linkClick, parseRoute, useLocation } from './route';

export function App() {
  const loc = useLocation();
  const route = parseRoute(loc.pathname, loc.search);
  switch (route.page) {
    case 'fleet':
      return (
        <Shell crumbs={<span aria-current="page">Fleet</span>}>
          <FleetPage params={route.params} />
        </Shell>
      );
    case 'node':
      return (
        <Shell
          crumbs={
            <>
              <a href={fleetHref()} onClick={linkClick}>
                Fleet
              </a>
              <span class="sep" aria-hidden="true">
                /
              </span>
              <span aria-current="page">{route.node}</span>
            </>
          }
        >
          {/* keyed: another node starts from a clean page */}
          <NodePage key={route.node} node={route.node} params={route.params} />
        </Shell>
      );
    case 'alerts':
      return (
        <Shell crumbs={<Crumbs trail={[]} current="Alerts" />}>
          <AlertsPage params={route.params} />
        </Shell>
      );
    case 'alert':
      return (
        <Shell crumbs={<Crumbs trail={[['Alerts', alertsHref()]]} current={`Alert ${route.id}`} />}>
          {/* keyed: another alert starts from a clean page */}
          <AlertDetailPage key={route.id} id={route.id} />
        </Shell>
      );
    case 'alertRules':
      return (
        <Shell crumbs={<Crumbs trail={[['Alerts', alertsHref()]]} current="Rules" />}>
          <AlertRulesPage params={route.params} />
        </Shell>
      );
    default:
      return (
        <Shell>
          <div class="page">
            <h1>Not found</h1>
            <p>
              There is no page at <code>{loc.pathname}</code>.{' '}
              <a href={fleetHref()} onClick={linkClick}>
                Go to the fleet
              </a>
              .
            </p>
          </div>
        </Shell>
      );
  }
}

/** Fleet / …trail / current. */
function Crumbs({ trail, current }: { trail: [string, string][]; current: string }) {
  return (
    <>
      {[['Fleet', fleetHref()] as [string, string], ...trail].map(([label, href]) => (
        <Fragment key={href}>
          <a href={href} onClick={linkClick}>
            {label}
          </a>
          <span class="sep" aria-hidden="true">
            /
          </span>
        </Fragment>
      ))}
      <span aria-current="page">{current}</span>
    </>
  );
}
