#!/usr/bin/perl
# The drop-in leaves the caller's last-read filehandle (${^LAST_FH}) and its line number ($.)
# as they were, as the real binding does: a program that reads its commands from STDIN and
# dies after a drop-in call keeps Perl's ", <STDIN> line N." at the end of its message.
#
# A program reads one command per line from STDIN and runs it: every drop-in method of both
# modes, the first object (which reads the config file and starts the server), a call that dies,
# an object dropped (the flight recorder writes its file), a new server after the last one was
# killed; after each it prints the line number and whether STDIN is still the last-read handle.
# The last command dies right after its call.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib", "$FindBin::Bin/../lib";

use File::Temp qw(tempdir);
use IPC::Open3 qw(open3);
use Symbol qw(gensym);
use Test::More;
use CRSBridgeTest;
use CRSBridge::Process;

my $DIR = tempdir(CLEANUP => 1);
my $LIB = "$FindBin::Bin/../lib";
my $CONFIG = "$DIR/crs-bridge.conf";
open(my $conf, '>', $CONFIG) or die "cannot write $CONFIG: $!\n";
print {$conf} "# the package's layout\ncommand: @{ CRSBridge::Process::command() }\nrecord: $DIR/record\n";
close($conf);

# The commands, one a line: each is Perl code run on $s (static) or $d (dynamic).
my @COMMANDS = (
    q{$s = PVE::RS::ResourceScheduling::Static->new},
    q{$s->add_node('a', 16, 2**36)},
    q{$s->add_node('b', 16, 2**36)},
    q{$s->add_service('vm:1', { stats => { maxcpu => 2, maxmem => 2**31 }, running => 1, 'current-node' => 'a' })},
    q{$s->add_service('vm:2', { stats => { maxcpu => 2, maxmem => 2**31 }, running => 1, 'current-node' => 'a' })},
    q{$s->add_service_usage_to_node('b', 'vm:3', { maxcpu => 1, maxmem => 2**30 })},
    q{$s->list_nodes},
    q{$s->contains_node('a')},
    q{$s->calculate_node_imbalance},
    q{$s->score_nodes_to_start_service({ maxcpu => 1, maxmem => 2**30 })},
    q{$s->score_best_balancing_migration_candidates([{ leader => 'vm:1', resources => ['vm:1'], nodes => ['b'] }], 1)},
    q{$s->score_best_balancing_migration_candidates_topsis([{ leader => 'vm:1', resources => ['vm:1'], nodes => ['b'] }], 1)},
    q{$s->select_best_balancing_migration([{ leader => 'vm:1', resources => ['vm:1'], nodes => ['b'] }])},
    q{$s->select_best_balancing_migration_topsis([{ leader => 'vm:1', resources => ['vm:1'], nodes => ['b'] }])},
    q{$s->plan_rebalance([{ leader => 'vm:1', resources => ['vm:1'], nodes => ['b'] }], {})},
    q{$s->explain_migrations([{ leader => 'vm:1', resources => ['vm:1'], nodes => ['b'] }], {})},
    q{eval { $s->add_node('a', 16, 2**36) }},
    q{$s->remove_service_usage('vm:2')},
    q{$s->remove_node('b')},
    q{$d = PVE::RS::ResourceScheduling::Dynamic->new},
    q{$d->add_node('a', { cpu => 1.5, maxcpu => 16, mem => 2**33, maxmem => 2**36 })},
    q{$d->add_resource('ct:1', { stats => { cpu => 0.5, maxcpu => 2, mem => 2**30, maxmem => 2**31 }, running => 1, 'current-node' => 'a' })},
    q{$d->score_nodes_to_start_resource({ cpu => 0.5, maxcpu => 1, mem => 2**29, maxmem => 2**30 })},
    q{$d->remove_resource('ct:1')},
    q{$d->calculate_node_imbalance},
    q{undef $s},
    q{kill 'KILL', CRSBridge::Connection->instance->server_pid},
    q{$d->calculate_node_imbalance},
    q{undef $d},
    q{$s = PVE::RS::ResourceScheduling::Static->new; $s->add_node('c', 8, 2**34)},
    q{die: $s->calculate_node_imbalance},
);

# Prints, after each command, "$. 1" (1: STDIN is still the last-read handle); a command
# "die: CODE" dies right after its code.
my $PROGRAM = <<'PERL';
use strict; use warnings;
use PVE::RS::ResourceScheduling::Static;
use PVE::RS::ResourceScheduling::Dynamic;
$| = 1;
our ($s, $d);
while (my $command = <STDIN>) {
    my $last = $command =~ s/^die: //;
    eval "$command; 1" or die "command $.: $@";
    die "the commands are done" if $last;
    printf "%d %d\n", $., (${^LAST_FH} // 0) == \*STDIN ? 1 : 0;
}
PERL

local %ENV = %ENV;
delete @ENV{ grep { /^CRS_BRIDGE_/ } keys %ENV };
$ENV{CRS_BRIDGE_CONFIG} = $CONFIG;
my $pid = open3(my $in, my $out, my $err = gensym, $^X, "-I$LIB", '-e', $PROGRAM);
print {$in} map { "$_\n" } @COMMANDS;
close($in);
my @said = <$out>;
my $stderr = do { local $/; <$err> };
waitpid($pid, 0);

my $count = @COMMANDS;
is(scalar @said, $count - 1, 'every command ran') or diag $stderr;
for my $i (0 .. $#said) {
    my $n = $i + 1;
    is($said[$i], "$n 1\n", "after `$COMMANDS[$i]`: \$. is $n, STDIN still the last-read handle");
}
like($stderr, qr/^the commands are done at -e line \d+, <STDIN> line $count\.\n\z/,
    'die names the caller\'s STDIN line, as with the binding');
opendir(my $dh, "$DIR/record") or die "cannot list $DIR/record: $!\n";
is(scalar(grep { /^crs-.*\.json$/ } readdir $dh), 2, 'the dropped objects were recorded');

done_testing();
