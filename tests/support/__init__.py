"""What the test tiers share: steps run eagerly and compiled (``harness``), captured joint
graphs (``joint_graphs``), the stress helpers (``stress``), the full-size switch
(``full_size``) and the rest. No test lives here."""
