package main

import "testing"

// TestDashboardUpstreamAliases: the console's upstream credentials before they were
// --upstream-*, --ca, --token and --token-file, still set them.
func TestDashboardUpstreamAliases(t *testing.T) {
	tests := []struct{ old, now string }{
		{"ca", "upstream-ca"},
		{"token", "upstream-token"},
		{"token-file", "upstream-token-file"},
	}
	for _, tt := range tests {
		t.Run(tt.old, func(t *testing.T) {
			cmd := newDashboardCmd()
			if err := cmd.Flags().Parse([]string{"--" + tt.old, "value-of-" + tt.old}); err != nil {
				t.Fatal(err)
			}
			if got := cmd.Flags().Lookup(tt.now).Value.String(); got != "value-of-"+tt.old {
				t.Errorf("--%s = %q after --%s, want its value", tt.now, got, tt.old)
			}
			if f := cmd.Flags().Lookup(tt.old); f.Deprecated == "" {
				t.Errorf("--%s is not marked deprecated", tt.old)
			}
		})
	}
}
