package main

import (
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
	}
	var dir, identity, trustDomain string
	initCmd := &cobra.Command{
		Use:     "init",
		Short:   "Create ca.pem, ca-key.pem and server.pem/server-key.pem (localhost, 127.0.0.1)",
		Example: "  meshflows certs init --dir certs",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := auth.InitDir(dir, time.Now()); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s, %s, %s and %s\nnext: meshflows certs issue --dir %s --identity egress-jms\n",
				filepath.Join(dir, auth.CAFile), filepath.Join(dir, auth.CAKeyFile), filepath.Join(dir, auth.ServerFile),
				filepath.Join(dir, auth.ServerKeyFile), dir)
			return nil
		},
	}
	initCmd.Flags().StringVar(&dir, "dir", "certs", "directory for the CA and server certificate")
	issueCmd := &cobra.Command{
		Use:     "issue",
		Short:   "Issue a client certificate NAME.pem/NAME-key.pem with the SPIFFE ID spiffe://TRUST-DOMAIN/NAME",
		Example: "  meshflows certs issue --dir certs --identity egress-jms",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			certPath, keyPath, err := auth.IssueInDir(dir, identity, trustDomain, time.Now())
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
	cmd.AddCommand(initCmd, issueCmd)
	return cmd
}
