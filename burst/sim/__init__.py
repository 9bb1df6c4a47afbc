"""The simulator behind `burst simulate`: traces (trace), the discrete-event replay through the
decision (simulate), the policies it is compared with (baselines), a lower bound on the cloud cost
(bound), and the comparison that runs them all (compare). It uses decide/ and the nouns, never the
running service."""
