/* test_mpierr_mpi.c: an MPI call that fails on the library's own
 * communicator comes back as RA_ERR_MPI, with a message, on every rank,
 * instead of aborting the job (ringattn.h, "MPI errors").
 *
 * The failure: the caller's communicator carries an attribute that
 * MPI_Comm_dup copies and whose delete callback fails, and MPI's default
 * handler, MPI_ERRORS_ARE_FATAL. The library's duplicate inherits both;
 * the call runs, then freeing the duplicate fails inside MPI_Comm_free,
 * which MPI reports through the duplicate's handler (and MPI may go on:
 * the communicator is left allocated). Without MPI_ERRORS_RETURN on the
 * duplicate the job aborts there. The caller's handler must come back
 * unchanged, and the library must still work afterwards. Run at P = 1..4;
 * verdicts are reduced over MPI_COMM_WORLD before cmocka asserts; rank 0
 * prints. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "call.h"
#include "support.h"

static int rank, nranks;

static const ra_shape shape = {.B = 1, .N = 24, .M = 24, .H = 2, .G = 1,
                               .D = 8, .Dv = 8};

static int deletes_fail; /* 1: the attribute's delete callback fails */

static int attr_delete(MPI_Comm comm, int keyval, void *value, void *extra)
{
    return deletes_fail ? MPI_ERR_OTHER : MPI_SUCCESS;
}

/* A duplicate of MPI_COMM_WORLD with MPI's default handler and the
 * attribute *keyval, whose copies fail to be deleted while deletes_fail. */
static MPI_Comm user_make(int *keyval)
{
    static int value;
    MPI_Comm user;
    MPI_Comm_dup(MPI_COMM_WORLD, &user);
    MPI_Comm_create_keyval(MPI_COMM_DUP_FN, attr_delete, keyval, NULL);
    MPI_Comm_set_attr(user, *keyval, &value);
    return user;
}

static void user_free(MPI_Comm *user, int *keyval)
{
    deletes_fail = 0;
    MPI_Comm_free(user);
    MPI_Comm_free_keyval(keyval);
}

/* 1 when comm's handler is still MPI_ERRORS_ARE_FATAL. */
static int handler_is_fatal(MPI_Comm comm)
{
    MPI_Errhandler eh;
    MPI_Comm_get_errhandler(comm, &eh);
    const int fatal = eh == MPI_ERRORS_ARE_FATAL;
    MPI_Errhandler_free(&eh);
    return fatal;
}

/* 1 on every rank when every rank's ok is 1. */
static int all_ranks(int ok)
{
    MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    return ok;
}

/* One call on the caller's communicator: backward or a forward under
 * strategy; 1 on every rank when every rank got RA_ERR_MPI naming
 * MPI_Comm_free and the communicator kept its handler. */
static int fails_cleanly(ra_strategy strategy, int backward)
{
    problem p;
    problem_make(&p, &shape, 7);
    ra_params prm;
    ra_params_default(&prm);
    prm.exec.strategy = strategy;
    int keyval;
    MPI_Comm user = user_make(&keyval);
    local_part lp, grad;
    local_part_make(&lp, &p, &prm, ra_params_layout(&prm, 0), rank, nranks);
    local_part_make(&grad, &p, &prm, ra_params_layout(&prm, 0), rank, nranks);
    ra_status st = ra_call_forward(MPI_COMM_WORLD, &shape, &prm, NULL,
                                   &(ra_qkv){lp.q, lp.k, lp.v},
                                   &(ra_out){lp.o, lp.lse, NULL}, NULL);
    deletes_fail = 1;
    if (st == RA_OK && backward)
        st = ra_call_backward(user, &shape, &prm, NULL,
                              &(ra_qkv){lp.q, lp.k, lp.v},
                              &(ra_grads){lp.o, lp.lse, lp.o, grad.q,
                                          grad.k, grad.v, NULL},
                              NULL);
    else if (st == RA_OK)
        st = ra_call_forward(user, &shape, &prm, NULL,
                             &(ra_qkv){lp.q, lp.k, lp.v},
                             &(ra_out){lp.o, lp.lse, NULL}, NULL);
    const char *msg = ra_error_message();
    const int ok = st == RA_ERR_MPI && strstr(msg, "MPI_Comm_free") &&
                   handler_is_fatal(user);
    printf("# %s%s: %s, \"%s\"\n", ra_strategy_name(strategy),
           backward ? " backward" : "", ra_status_str(st), msg);
    user_free(&user, &keyval);
    local_part_free(&grad);
    local_part_free(&lp);
    problem_free(&p);
    return all_ranks(ok);
}

/* After the failures, a forward on MPI_COMM_WORLD still gives the right
 * rows. */
static int still_works(void)
{
    problem p;
    problem_make(&p, &shape, 8);
    ra_params prm;
    ra_params_default(&prm);
    local_part lp;
    local_part_make(&lp, &p, &prm, ra_params_layout(&prm, 0), rank, nranks);
    check_result c = {0};
    if (ra_call_forward(MPI_COMM_WORLD, &shape, &prm, NULL,
                        &(ra_qkv){lp.q, lp.k, lp.v},
                        &(ra_out){lp.o, lp.lse, NULL}, NULL) == RA_OK)
        c = check_slice(&p, &prm, NULL, &lp.qs, lp.o, lp.lse);
    else
        c.bad_inf = 1;
    check_result g = check_allreduce(MPI_COMM_WORLD, &c);
    local_part_free(&lp);
    problem_free(&p);
    return check_ok(&g) && g.rows == shape.B * shape.H * shape.N;
}

static void test_ring_forward_returns(void **state)
{
    (void)state;
    assert_true(fails_cleanly(RA_STRATEGY_RING, 0));
}

static void test_strategy_forward_returns(void **state)
{
    (void)state;
    assert_true(fails_cleanly(RA_STRATEGY_TREE, 0));
}

static void test_backward_returns(void **state)
{
    (void)state;
    assert_true(fails_cleanly(RA_STRATEGY_RING, 1));
}

static void test_recovers(void **state)
{
    (void)state;
    assert_true(still_works());
}

int main(int argc, char **argv)
{
    mpi_test_init(&argc, &argv, &rank, &nranks);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ring_forward_returns),
        cmocka_unit_test(test_strategy_forward_returns),
        cmocka_unit_test(test_backward_returns),
        cmocka_unit_test(test_recovers),
    };
    return mpi_test_finish(cmocka_run_group_tests(tests, NULL, NULL));
}
