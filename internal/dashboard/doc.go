// Package dashboard is the MeshFlows web console: server-rendered pages (html/template) over
// the registry, gateway and orchestrator APIs, with a little embedded JS for live updates and
// write actions. Read-only pages work without JS. Write actions need the admin token unless
// the console runs open (meshflows dev).
package dashboard
