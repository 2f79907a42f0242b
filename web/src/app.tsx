import { FleetPage } from './components/Fleet';
import { NodePage } from './components/NodePage';
import { Shell } from './components/Shell';
import { fleetHref, linkClick, parseRoute, useLocation } from './route';

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
