package routing

import "slices"

// Follower derives the tables of a sequence of inputs — the routes views a gateway or an xDS
// server receives, each whole — through a Deriver: each input is compared with the one
// before (manifests and public paths by incarnation, the policy by service) and only the
// difference applied. The first input, and one of another registry epoch (a view that is
// not a continuation of the last), are derived whole.
type Follower struct {
	d         *Deriver
	epoch     string
	manifests map[string]ManifestInput
	aliases   map[aliasID]Alias
	policy    Policy
}

// Next returns the table of in, of the registry epoch epoch: whole says it was derived whole
// (rows is then nil); else rows are the rows that changed (none: the same table).
func (f *Follower) Next(in Input, epoch string) (t *Table, whole bool, rows []RowChange) {
	if f.d == nil || f.epoch != epoch {
		f.Reset(in, epoch)
		return f.d.Table(), true, nil
	}
	changes := f.diff(in)
	if len(changes) == 0 {
		return f.d.Table(), false, nil
	}
	t, rows = f.d.Apply(changes...)
	f.remember(in)
	return t, false, rows
}

// Reset derives in whole and follows from it.
func (f *Follower) Reset(in Input, epoch string) {
	f.d, f.epoch = NewDeriver(in), epoch
	f.remember(in)
}

// Deriver returns the deriver that follows (nil before the first input).
func (f *Follower) Deriver() *Deriver { return f.d }

// remember keeps in as the input the deriver holds.
func (f *Follower) remember(in Input) {
	f.manifests = make(map[string]ManifestInput, len(in.Manifests))
	for _, mi := range in.Manifests {
		f.manifests[ManifestID(mi)] = mi
	}
	f.aliases = make(map[aliasID]Alias, len(in.Aliases))
	for _, a := range in.Aliases {
		f.aliases[idOfAlias(a)] = a
	}
	f.policy = in.Policy
}

// diff returns the changes that take the deriver's input to in.
func (f *Follower) diff(in Input) []Change {
	var out []Change
	for s, p := range in.Policy {
		if old, ok := f.policy[s]; !ok || !slices.Equal(old, p) {
			out = append(out, Change{Policy: &PolicyChange{Service: s, Prefixes: p}})
		}
	}
	for s := range f.policy {
		if _, ok := in.Policy[s]; !ok {
			out = append(out, Change{Policy: &PolicyChange{Service: s}})
		}
	}
	if !slices.EqualFunc(in.Static, f.d.static, func(a, b StaticRoute) bool {
		return a.Path == b.Path && a.Upstream == b.Upstream && slices.Equal(a.Methods, b.Methods)
	}) {
		st := slices.Clone(in.Static)
		out = append(out, Change{Static: &st})
	}
	seen := make(map[string]bool, len(in.Manifests))
	for i := range in.Manifests {
		mi := &in.Manifests[i]
		id := ManifestID(*mi)
		seen[id] = true
		if old, ok := f.manifests[id]; !ok || old.Generation != mi.Generation || old.Endpoint != mi.Endpoint {
			out = append(out, Change{PutManifest: mi})
		}
	}
	for id := range f.manifests {
		if !seen[id] {
			out = append(out, Change{DeleteManifest: id})
		}
	}
	seenAlias := make(map[aliasID]bool, len(in.Aliases))
	for i := range in.Aliases {
		a := &in.Aliases[i]
		k := idOfAlias(*a)
		seenAlias[k] = true
		if old, ok := f.aliases[k]; !ok || old != *a {
			out = append(out, Change{PutAlias: a})
		}
	}
	for k, a := range f.aliases {
		if !seenAlias[k] {
			out = append(out, Change{DeleteAlias: &a})
		}
	}
	return out
}
