package main

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/meshflows/meshflows/internal/auth"
)

func newCertsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "certs",
		Short: "Create a development CA and certificates for mTLS",
		Long: `Create a development certificate authority and the certificates that a registry and its
providers need to run with mTLS on one machine. For development only: the CA key sits in the
directory next to the certificates.`,
		Example: "  meshflows certs init --dir certs --host registry.local\n  meshflows certs issue --dir certs --identity egress-jms",
	}
	var (
		dir, identity, trustDomain string
		hosts                      []string
		validFor                   time.Duration
	)
	initCmd := &cobra.Command{
		Use:   "init",
		Short: "Create ca.pem, ca-key.pem and server.pem/server-key.pem (localhost, 127.0.0.1, ::1 and --host)",
		Long: `Create a development CA (ca.pem, ca-key.pem) and a server certificate (server.pem,
server-key.pem) valid for localhost, 127.0.0.1, ::1 and every --host (a DNS name or an IP
address; repeat or comma-separate), for a year. Nothing already in --dir is overwritten: a
--dir that already holds them, valid for these hosts, is kept (exit 0, "kept"); one that holds
a part of them, or a server certificate for other hosts, is an error.`,
		Example: "  meshflows certs init --dir certs\n  meshflows certs init --dir certs --host registry.internal --host 10.0.0.5",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch err := auth.InitDir(dir, time.Now(), hosts...); {
			case errors.Is(err, auth.ErrInitialized):
				fmt.Fprintf(cmd.OutOrStdout(), "kept %s: it already holds a CA and a server certificate for these hosts\n", dir)
				return nil
			case err != nil:
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s, %s, %s and %s\nnext: meshflows certs issue --dir %s --identity egress-jms\n",
				filepath.Join(dir, auth.CAFile), filepath.Join(dir, auth.CAKeyFile), filepath.Join(dir, auth.ServerFile),
				filepath.Join(dir, auth.ServerKeyFile), dir)
			return nil
		},
	}
	initCmd.Flags().StringVar(&dir, "dir", "certs", "directory for the CA and server certificate")
	initCmd.Flags().StringSliceVar(&hosts, "host", nil, "another DNS name or IP address the server certificate is valid for")
	issueCmd := &cobra.Command{
		Use:   "issue",
		Short: "Issue a client certificate NAME.pem/NAME-key.pem with the SPIFFE ID spiffe://TRUST-DOMAIN/NAME",
		Long: `Issue a client certificate, signed by the CA of --dir, for --identity: the identity the
registry's RBAC policy knows it by (a provider's service name, "gateway", "orchestrator"…),
carried as the SPIFFE ID spiffe://TRUST-DOMAIN/IDENTITY and as the common name.`,
		Example: "  meshflows certs issue --dir certs --identity egress-jms\n  meshflows certs issue --dir certs --identity gateway --valid-for 24h",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if identity == "" {
				return &exitError{code: 2, err: errors.New("--identity is required: the name the RBAC policy knows this client by, e.g. --identity egress-jms")}
			}
			certPath, keyPath, err := auth.IssueInDir(dir, identity, trustDomain, time.Now(), validFor)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s and %s for identity %q (spiffe://%s/%s)\n", certPath, keyPath, identity, trustDomain, identity)
			return nil
		},
	}
	issueCmd.Flags().StringVar(&dir, "dir", "certs", "directory holding the CA")
	issueCmd.Flags().StringVar(&identity, "identity", "", "identity to certify (the service name it registers)")
	issueCmd.Flags().StringVar(&trustDomain, "trust-domain", auth.DefaultTrustDomain, "SPIFFE trust domain")
	issueCmd.Flags().DurationVar(&validFor, "valid-for", 365*24*time.Hour, "how long the certificate is valid, like 24h (short-lived certificates for rotation tests)")
	cmd.AddCommand(initCmd, issueCmd)
	return cmd
}
